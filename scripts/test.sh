#!/usr/bin/env bash
# One command: set up a fresh Debian 12 machine, build, and run the whole test suite.
#   scripts/test.sh            everything (release build, then the ASan+UBSan build's unit tests)
#   KILN_SKIP_SANITIZE=1 ...   skip the sanitizer build
#   KILN_SKIP_TSAN=1 ...       skip the ThreadSanitizer build
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh

start=$(date +%s)
bash scripts/build.sh build
bash scripts/default_models.sh build  # the toy Qwen3.5 of configs/default.yaml
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)

if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  # Sanitizer build with clang (also proves the tree builds warning-free with clang), plugins linked
  # statically so no dlopen hides a report. Runs the unit-labelled tests and short libFuzzer runs.
  CC=clang CXX=clang++ bash scripts/build.sh build-asan -DKILN_SANITIZE=ON -DKILN_STATIC_PLUGINS=ON \
    -DKILN_BUILD_BENCH=OFF -DKILN_FUZZ=ON
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$(nproc)" -L 'unit|fuzz' --timeout 900)
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
  CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON \
    -DKILN_STATIC_PLUGINS=ON -DKILN_BUILD_BENCH=OFF >/dev/null
  cmake --build build-tsan -j "$(nproc)" --target "${tsan_tests[@]}"
  for t in "${tsan_tests[@]}"; do
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" KILN_CPU_THREADS=1 \
      VK_ICD_FILENAMES=/nonexistent VK_DRIVER_FILES=/nonexistent \
      build-tsan/bin/"$t" --gtest_brief=1 --gtest_filter="${tsan_filter[$t]:-*}"
  done
fi
echo "test.sh: finished in $(( $(date +%s) - start ))s"
