#!/usr/bin/env bash
# Builds and runs every test. Usage: bash scripts/test.sh [--sanitize]
#   --sanitize: an AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKIWI_BUILD_PYTHON=ON)
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  flags=(-DCMAKE_BUILD_TYPE=Debug -DKIWI_SANITIZE=ON -DKIWI_BUILD_BENCH=OFF)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" "${flags[@]}" >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
# The Python package (kiwi and kiwi.torch, docs/pytorch.md) against the extension just built.
if [ -d "$build/python/kiwi" ]; then
  PYTHONPATH="$build/python" PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
fi
