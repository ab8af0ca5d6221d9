#!/usr/bin/env bash
# Configures and builds kiln with Ninja, through ccache when present.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
#   KILN_TARGETS="a b" scripts/build.sh ...   builds only those targets (default: everything)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$here/build}; shift || true
# One compiler cache for every clone on this machine: paths inside the clone are hashed relative to
# it and the working directory is not hashed (it would be, for -g builds), so a second clone in
# another folder compiles almost nothing. Three build types of the whole tree need more than
# ccache's default 5 GB.
export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-16G}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
read -r -a targets <<< "${KILN_TARGETS:-}"
cmake --build "$build" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
