#!/usr/bin/env bash
# The SDK as a third party uses it: install kiln into a temporary prefix, configure and build
# examples/third_party_parser against only that prefix, load the plugin into kiln, and call it.
#   sdk_install_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
kiln="$build/bin/kiln"

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
test -f "$work/prefix/include/kiln/kiln_plugin.h"
test -f "$work/prefix/lib/cmake/Kiln/KilnConfig.cmake"

# Configure with nothing but the prefix: no kiln source tree, no build tree on any search path.
cp -r "$src/examples/third_party_parser" "$work/example"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
env -u CMAKE_PREFIX_PATH cmake -S "$work/example" -B "$work/example-build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/configure.log"
cmake --build "$work/example-build" >"$work/build.log"
so=$(find "$work/example-build" -name third_party_parser.so -print -quit)
[ -n "$so" ] || { echo "FAIL: third_party_parser.so was not built"; exit 1; }

# kiln loads it ...
listing=$("$kiln" plugins --load "$so")
echo "$listing"
grep -Eq '^tool-parser +markdown_json +third_party_parser' <<<"$listing" \
  || { echo "FAIL: kiln plugins does not list the example's markdown_json tool parser"; exit 1; }

# ... and calls it: the plugins path comes from a config, as a user would set it up.
printf 'plugins:\n  paths: [%s]\n' "$(dirname "$so")" >"$work/kiln.yaml"
"$kiln" plugins --config "$work/kiln.yaml" | grep -q markdown_json
input=$'Let me check.\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n'
out=$(printf '%s' "$input" | "$kiln" parse --config "$work/kiln.yaml" --tool-parser markdown_json)
echo "$out"
grep -q '"name": *"get_weather"' <<<"$out" || { echo "FAIL: the call was not parsed"; exit 1; }
grep -q 'Paris' <<<"$out" || { echo "FAIL: arguments missing"; exit 1; }

# A model plugin from the same prefix alone (C++17, the SDK's name table and building blocks):
# built, listed, and run on a checkpoint it declares.
cp -r "$src/examples/third_party_model" "$work/model"
env -u CMAKE_PREFIX_PATH cmake -S "$work/model" -B "$work/model-build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/model-configure.log"
cmake --build "$work/model-build" >"$work/model-build.log"
model_so=$(find "$work/model-build" -name toy_lm.so -print -quit)
[ -n "$model_so" ] || { echo "FAIL: toy_lm.so was not built"; exit 1; }
"$kiln" plugins --load "$model_so" | grep -Eq '^model +toy_lm +toy_lm' \
  || { echo "FAIL: kiln plugins does not list the example's toy_lm model"; exit 1; }
python3 "$work/model/write_checkpoint.py" "$work/toy"
printf 'plugins:\n  paths: [%s]\n' "$(dirname "$model_so")" >"$work/model.yaml"
logits=$("$kiln" logits --model "$work/toy" --ids 1,2,3 --config "$work/model.yaml" --device cpu)
count=$(tr ',' '\n' <<<"$logits" | grep -c '[0-9]')
[ "$count" = 32 ] || { echo "FAIL: expected 32 logits from toy_lm, got: $logits"; exit 1; }
echo "PASS: SDK installed, example parser and model built from the prefix alone, loaded and run"
