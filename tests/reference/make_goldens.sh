#!/usr/bin/env bash
# Regenerates tests/reference/goldens/: writes each tiny Gemma 4 test checkpoint with the project's
# generator (build/bin/make_gemma4_checkpoint, tools/checkpoints/gemma4_checkpoint.cpp) and runs the
# independent PyTorch reference on it. Needs Debian's python3-torch (apt install python3-torch).
#   tests/reference/make_goldens.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
gen=$build/bin/make_gemma4_checkpoint
[ -x "$gen" ] || { echo "build $gen first (ninja -C $build make_gemma4_checkpoint)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$root/tests/reference/goldens"
# Prompts: 24 tokens (three windows of 8), 5 tokens (inside one window), 40 tokens; ids in [3, 512).
ids() { /usr/bin/python3 -c "print(','.join(str(3 + (i * $2 + $3) % 509) for i in range($1)))"; }
for v in kitchen_sink 31b_like e4b_like; do
  "$gen" "$v" "$tmp/$v"
  /usr/bin/python3 "$root/tests/reference/gemma4_reference.py" --model "$tmp/$v" \
    --ids "$(ids 24 37 11)" --ids "$(ids 5 101 7)" --ids "$(ids 40 53 200)" \
    --out "$root/tests/reference/goldens/gemma4_$v.json"
done
