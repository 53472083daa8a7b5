#!/usr/bin/env bash
# Builds and runs every test. Usage: bash scripts/test.sh [--sanitize]   (after scripts/setup.sh)
#   --sanitize: an AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
exclude=()
mapfile -t flags < <(bash scripts/cmake_flags.sh)
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  flags=(-DCMAKE_BUILD_TYPE=Debug -DKIWI_SANITIZE=ON -DKIWI_BUILD_BENCH=OFF)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Two searches that take 6 and 2.5 minutes under the sanitizers (10-20x their plain time) and check
  # search outcomes, which the plain run checks; their code paths run sanitized in smaller tests.
  exclude=(-E '^(HybridCli\.GptThreeInterleavesAndMatchesMegatronsConfiguration|SearchHybridPlan\.ContextParallelismEqualsBruteForce)$')
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" "${flags[@]}" >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" "${exclude[@]}"
# The Python package (kiwi and kiwi.torch, docs/pytorch.md) against the extension just built, in the
# virtual environment scripts/setup.sh made.
if [ -d "$build/python/kiwi" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "test: .venv is missing: run bash scripts/setup.sh first" >&2
    exit 2
  fi
  # A headless browser for the plan report's screenshot test (python/tests/test_plan_report.py).
  bash scripts/apt_install.sh test chromium
  KIWI_REQUIRE_CHROMIUM=1 PYTHONPATH="$build/python" PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1 \
    .venv/bin/python -m pytest -q -p no:cacheprovider python/tests
fi
