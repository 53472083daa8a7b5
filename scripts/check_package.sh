#!/usr/bin/env bash
# Checks `pip install .` as a Python user runs it: a fresh virtual environment, the wheel built by
# scikit-build-core (pyproject.toml), then the `kiwi` command and `import kiwi` from that environment.
# Usage: bash scripts/check_package.sh   (after scripts/setup.sh; needs PyPI for the build requirements)
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install -q --disable-pip-version-check .
cd "$dir"  # away from the source tree: the installed package, not python/kiwi
"$dir/venv/bin/kiwi" --help >/dev/null
"$dir/venv/bin/kiwi" graph --model gpt --layers 1 --json | "$dir/venv/bin/python" -c '
import json, sys
summary = json.load(sys.stdin)
assert summary["nodes"] > 0, summary'
set +e
"$dir/venv/bin/kiwi" graph /nonexistent.json 2>/dev/null
code=$?
set -e
[ "$code" -eq 2 ] || { echo "check_package: kiwi on a missing file exited $code, not 2" >&2; exit 1; }
"$dir/venv/bin/python" -c 'import kiwi; print("check_package: kiwi", kiwi.__version__, "from", kiwi.__file__)'
