#!/usr/bin/env bash
# Regenerates tests/reference/goldens/: writes each tiny test checkpoint with the project's
# generator (build/bin/make_checkpoint, tools/checkpoints/) and runs the independent PyTorch
# reference on it. Needs Debian's python3-torch (apt install python3-torch).
#   tests/reference/make_goldens.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
gen=$build/bin/make_checkpoint
[ -x "$gen" ] || { echo "build $gen first (ninja -C $build make_checkpoint)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$root/tests/reference/goldens
mkdir -p "$out"
ids() { /usr/bin/python3 -c "print(','.join(str(3 + (i * $2 + $3) % 509) for i in range($1)))"; }
# Gemma 4: 24 tokens (three windows of 8), 5 tokens (inside one window), 40 tokens.
for v in kitchen_sink 31b_like e4b_like; do
  "$gen" gemma4 "$v" "$tmp/$v"
  /usr/bin/python3 "$root/tests/reference/gemma4_reference.py" --model "$tmp/$v" \
    --ids "$(ids 24 37 11)" --ids "$(ids 5 101 7)" --ids "$(ids 40 53 200)" --out "$out/gemma4_$v.json"
done
# Qwen3.5: 70 tokens (past one 64-token delta-rule chunk), 2 tokens (shorter than the conv window), 9.
for v in qwen3_5_moe qwen3_next qwen3_5_dense; do
  "$gen" qwen3_5 "$v" "$tmp/$v"
  /usr/bin/python3 "$root/tests/reference/qwen3_5_reference.py" --model "$tmp/$v" \
    --ids "$(ids 70 37 11)" --ids "$(ids 2 101 7)" --ids "$(ids 9 53 200)" --out "$out/$v.json"
done
