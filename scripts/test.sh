#!/usr/bin/env bash
# One command: set up a fresh Debian 12 machine, build, and run the whole test suite.
#   scripts/test.sh            everything (release build, then the ASan+UBSan and TSan builds)
#   KILN_SKIP_SANITIZE=1 ...   skip the ASan+UBSan build
#   KILN_SKIP_TSAN=1 ...       skip the ThreadSanitizer build
# Prints each stage's wall time and each ctest run's ten slowest tests.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh

start=$(date +%s)
stages=()
# stage NAME COMMAND...: runs it and records its wall time.
stage() {
  local name=$1 t0
  shift
  t0=$(date +%s)
  "$@"
  stages+=("$(printf '%-16s %5ds' "$name" $(( $(date +%s) - t0 )))")
  echo "test.sh: stage $name: $(( $(date +%s) - t0 ))s"
}
# run_ctest DIR [ctest args...]: ctest in DIR on every core, then its ten slowest tests.
run_ctest() {
  local dir=$1 log
  shift
  log="$dir/ctest-output.log"
  (cd "$dir" && ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@") 2>&1 | tee "$log"
  echo "test.sh: the ten slowest tests in $dir:"
  # awk reads all of sort's output (head would close the pipe early: SIGPIPE, and pipefail fails the run).
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' "$log" | sort -rn |
    awk 'NR <= 10 { printf "  %8.1fs  %s\n", $1, $2 }'
}

stage release-build bash scripts/build.sh build
stage default-models bash scripts/default_models.sh build  # the toy Qwen3.5 of configs/default.yaml
stage release-ctest run_ctest build

if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  # Sanitizer build with clang (also proves the tree builds warning-free with clang), plugins linked
  # statically so no dlopen hides a report. Builds only what the unit-labelled tests and the short
  # libFuzzer runs need (target kiln_unit_tests), and runs them.
  stage asan-build env CC=clang CXX=clang++ KILN_TARGETS=kiln_unit_tests bash scripts/build.sh build-asan \
    -DKILN_SANITIZE=ON -DKILN_STATIC_PLUGINS=ON -DKILN_BUILD_BENCH=OFF -DKILN_FUZZ=ON
  asan_ctest() { ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest build-asan -L 'unit|fuzz'; }
  stage asan-ctest asan_ctest
fi
if [ "${KILN_SKIP_TSAN:-0}" != 1 ]; then
  # ThreadSanitizer over the tests that run work on other threads (the CPU device's worker, the
  # model host's steps in flight), on the CPU device alone: no Vulkan driver is loaded (Mesa's
  # lavapipe threads are not instrumented) and the kernels' TBB loops run on the worker thread
  # (Debian's libtbb is not instrumented either, and its inlined partitioner code races by design).
  tsan_tests=(backend_executable_test test_model_host test_serve test_grammar)
  # test_grammar: the matcher's tests (threads share one grammar's mask cache); the suite and the
  # random-output tests are single-threaded and would take minutes under TSan. test_serve: the
  # structured-output tests that send one request at a time stay out (minutes under TSan); the
  # simultaneous constrained requests stay in.
  declare -A tsan_filter=([test_grammar]='Matcher.*:TextRules.*'
                          [test_serve]='-*RandomWeights.JsonSchema*:*RandomWeights.Forced*')
  stage tsan-build env CC=clang CXX=clang++ KILN_TARGETS="${tsan_tests[*]}" bash scripts/build.sh build-tsan \
    -DKILN_TSAN=ON -DKILN_STATIC_PLUGINS=ON -DKILN_BUILD_BENCH=OFF
  # Two lanes, one per core: test_serve (most of the stage, and one core's worth in one process)
  # split into two gtest shards, the small binaries ahead of the first shard. Each lane logs to
  # its own file, printed when both are done.
  tsan_one() {  # tsan_one BINARY [shard]: one binary, or one of its two shards
    local shard=()
    [ -n "${2:-}" ] && shard=(GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX="$2")
    env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$here/scripts/tsan.supp" KILN_CPU_THREADS=1 \
      VK_ICD_FILENAMES=/nonexistent VK_DRIVER_FILES=/nonexistent "${shard[@]}" \
      build-tsan/bin/"$1" --gtest_brief=1 --gtest_filter="${tsan_filter[$1]:-*}"
  }
  tsan_run() {
    local small=("${tsan_tests[@]/test_serve/}") rc=0
    ( for t in ${small[*]}; do tsan_one "$t" || exit 1; done && tsan_one test_serve 0 ) \
      > build-tsan/tsan-lane0.log 2>&1 &
    local lane0=$!
    tsan_one test_serve 1 > build-tsan/tsan-lane1.log 2>&1 &
    local lane1=$!
    wait "$lane0" || rc=1
    wait "$lane1" || rc=1
    cat build-tsan/tsan-lane0.log build-tsan/tsan-lane1.log
    return "$rc"
  }
  stage tsan-run tsan_run
fi
echo "test.sh: wall time per stage:"
printf '  %s\n' "${stages[@]}"
echo "test.sh: finished in $(( $(date +%s) - start ))s"
