#!/usr/bin/env bash
# One command: set up a fresh Debian 12 machine, build, and run the whole test suite.
#   scripts/test.sh            everything (release build, then the ASan+UBSan build's unit tests)
#   KILN_SKIP_SANITIZE=1 ...   skip the sanitizer build
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh

start=$(date +%s)
bash scripts/build.sh build
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)

if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  # Sanitizer build with clang (also proves the tree builds warning-free with clang), plugins linked
  # statically so no dlopen hides a report. Runs the unit-labelled tests and short libFuzzer runs.
  CC=clang CXX=clang++ bash scripts/build.sh build-asan -DKILN_SANITIZE=ON -DKILN_STATIC_PLUGINS=ON \
    -DKILN_BUILD_BENCH=OFF -DKILN_FUZZ=ON
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$(nproc)" -L 'unit|fuzz' --timeout 900)
fi
echo "test.sh: finished in $(( $(date +%s) - start ))s"
