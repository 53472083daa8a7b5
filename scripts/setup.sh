#!/usr/bin/env bash
# Installs what kiwi needs and builds it into build/: the C++ libraries from Debian 12's packages (only
# those missing), the Python side (torch, pytest, pybind11) into the virtual environment .venv.
# Usage: bash scripts/setup.sh            (run as root, or with sudo available)
# Afterwards: ./build/kiwi (the command), .venv/bin/python -c 'import kiwi' (the Python package).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${KIWI_PYTHON:-python3}   # the interpreter .venv is made from (CPython >= 3.9)

packages=(
  build-essential cmake pkg-config git
  coinor-libcbc-dev coinor-libclp-dev     # MILP/LP backend (COIN-OR CBC/CLP)
  toulbar2                                # cost function networks: the sharding solver's priced subproblems
  nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  libtomlplusplus-dev                     # torchtitan's TOML job configs
  libgtest-dev libgmock-dev libbenchmark-dev
)
if ! command -v "$python" >/dev/null || ! "$python" -c 'import venv, ensurepip, sysconfig' 2>/dev/null; then
  packages+=(python3 python3-venv python3-dev)   # Debian's own Python, when the machine has no other
  python=python3
fi

bash scripts/apt_install.sh setup "${packages[@]}"

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $("$python" --version 2>&1)" >&2
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
# `import kiwi` in .venv finds the package the CMake build assembles in build/python.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/build/python" > "$site/kiwi-build.pth"

jobs=$(nproc 2>/dev/null || echo 2)
mapfile -t flags < <(bash scripts/cmake_flags.sh)  # the same flags as scripts/test.sh: one build
cmake -S . -B build "${flags[@]}" >/dev/null
cmake --build build -j"$jobs" --target kiwi kiwi_python
echo "setup: built build/kiwi and the Python package build/python/kiwi (.venv/bin/python -c 'import kiwi')" >&2
