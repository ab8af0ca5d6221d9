#!/usr/bin/env bash
# Packs what bench/gpu/run.sh needs on a GPU machine that has no build tools for kiln: the release
# build's benchmarks and device tests, stripped, with the plugins beside them and the shared
# libraries Debian 12 provides that such a machine may lack, into .gpu/ (ignored by git; carried by
# the device tool). Run after `cmake --build build`:  bash bench/gpu/pack.sh [build]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=.gpu
rm -rf "$out"
mkdir -p "$out/bin/plugins" "$out/lib"
# (Not the server's binaries: ICU's data alone would take half of the device tool's 64 MiB.)
bins=(bench_model bench_ops vulkan_backend_test backend_ops_test backend_batch_invariance_test test_model_host)
for b in "${bins[@]}"; do strip -o "$out/bin/$b" "$build/bin/$b"; done
find "$build/bin/plugins" -maxdepth 2 -name '*.so' -exec sh -c 'strip -o "$1/bin/plugins/$(basename "$2")" "$2"' _ "$out" {} \;
# Libraries outside the C runtime and the Vulkan loader (the loader comes from .gl, see the device
# README), found through ldd.
for f in "$out"/bin/* "$out"/bin/plugins/*.so; do
  [ -f "$f" ] || continue
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libgcc_s|libstdc\+\+|libvulkan|libpthread|libdl|librt)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
du -sh "$out"
