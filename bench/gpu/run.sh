#!/usr/bin/env bash
# Everything issue 40 measures on a real GPU, in one go (bench/gpu/pack.sh first, then run this
# there through the device tool with .gl and .gpu carried):
#   the device tests (Vulkan backend, op harness, batch invariance, model host with candidates),
#   bench_ops --quick (GEMV / GEMM against the device's
#   copy bandwidth), bench_model one sequence (decode share of bandwidth per dtype, prefill tok/s)
#   and 64 sequences with whole logits rows and with device candidates (step time, bytes read back).
# Output goes to stdout and to $OUT/gpu.log when OUT is set. Sections are bounded by timeouts so
# one hang cannot eat the lease.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${OUT:-/tmp}/gpu.log
exec > >(tee "$log") 2>&1
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export LD_LIBRARY_PATH=$PWD/.gpu/lib
if ! ls /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json >/dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
bin=.gpu/bin
nvidia-smi -L || true
section() { echo; echo "=== $* ($(date +%T))"; }
section tests

for t in vulkan_backend_test backend_ops_test backend_batch_invariance_test test_model_host; do
  timeout 240 "$bin/$t" --gtest_brief=1 2>&1 | grep -Ev ' info ' | tail -8
done
section bench_ops
timeout 180 "$bin/bench_ops" --device vulkan --quick 2>&1 | grep -Ev ' info '
section "bench_model one sequence, prompt 512"
for c in 0 64; do
  timeout 240 "$bin/bench_model" --device vulkan --dtype f16,bf16,q8_0 --prompt 512 --decode 32 --candidates $c 2>&1 |
    grep -Ev ' info '
done
section "bench_model 64 sequences, whole rows then candidates"
for c in 0 64; do
  timeout 180 "$bin/bench_model" --device vulkan --dtype bf16 --prompt 64 --decode 16 --seqs 64 --candidates $c 2>&1 |
    grep -Ev ' info ' | tail -6
done
section done
