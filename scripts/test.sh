#!/usr/bin/env bash
# Set-up command 2: installs dependencies, builds, and runs every test:
#  1. the normal build (gcc) and its whole test suite;
#  2. the whole suite again built with clang, ASan and UBSan (build-asan),
#     which also builds the libFuzzer targets;
#  3. a short run of each fuzzer (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
jobs="$(nproc)"
# One test more than cores: most of them wait (leases, timeouts, child
# processes) more than they compute. On 2 cores, -j3 ran the suite in 176 s
# against 242 s at -j2 (docs/testing.md).
test_jobs=$((jobs + 1))
(cd build && ctest --output-on-failure -j"$test_jobs" --timeout 600)

echo "== sanitizer build (clang, ASan + UBSan) =="
CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSLICED_SANITIZE=ON -DSLICED_FUZZ=ON -DSLICED_WITH_ETCD=ON -DSLICED_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
# Benchmarks measure speed, which a sanitizer build does not have: it builds
# none (SLICED_BENCH=OFF).
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  ctest --output-on-failure -j"$test_jobs" --timeout 900)

echo "== fuzzing =="
scripts/fuzz.sh 20
