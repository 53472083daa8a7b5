#!/usr/bin/env bash
# Prints, one a line, the CMake flags of kiwi's build in build/ (scripts/setup.sh and scripts/test.sh share them):
# the Python extension built for the project's virtual environment .venv, warnings as errors (the developer build).
set -euo pipefail
cd "$(dirname "$0")/.."
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKIWI_BUILD_PYTHON=ON -DKIWI_WERROR=ON)
if [ -x .venv/bin/python ]; then
  flags+=(-DPython_EXECUTABLE="$PWD/.venv/bin/python")
  dir=$(.venv/bin/python -m pybind11 --cmakedir 2>/dev/null || true)
  [ -z "$dir" ] || flags+=(-Dpybind11_DIR="$dir")
fi
printf "%s\n" "${flags[@]}"
