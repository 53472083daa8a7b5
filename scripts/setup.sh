#!/usr/bin/env bash
# Installs every Debian 12 package kiwi needs (only those missing) and builds kiwi into build/.
# Usage: bash scripts/setup.sh            (run as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git
  coinor-libcbc-dev coinor-libclp-dev     # MILP/LP backend (COIN-OR CBC/CLP)
  toulbar2                                # cost function networks: the sharding solver's priced subproblems
  nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-pytest  # the Python package kiwi (docs/pytorch.md)
  python3-numpy python3-torch python3-torchvision libopenblas0-pthread  # kiwi.torch, its tests and bench
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKIWI_BUILD_PYTHON=ON >/dev/null  # same flags as scripts/test.sh: one build
cmake --build build -j"$jobs" --target kiwi
echo "setup: built build/kiwi" >&2
