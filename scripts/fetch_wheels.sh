#!/usr/bin/env bash
# Downloads, on a machine that reaches PyPI, the wheels a GPU machine without network needs for xstage's diffusers
# integration and Python tests: diffusers and its requirements, and pytest, at the versions pinned in
# scripts/requirements.txt, built for that machine's Python (default 3.12; PYTHON_VERSION=3.11 ...) on x86-64 Linux.
# On the GPU machine the scripts install those its Python lacks (scripts/gpu/env.sh: use_wheels; XSTAGE_WHEELS=DIR).
#
#   scripts/fetch_wheels.sh DIR        # then carry DIR to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/fetch_wheels.sh DIR" >&2; exit 2; }
dir=$1
py=${PYTHON_VERSION:-3.12}
python=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
# The pinned versions of diffusers, everything it requires, and pytest (the "diffusers" block of requirements.txt).
specs=$(sed -n '/^# diffusers for xstage.diffusers/,$p' scripts/requirements.txt | sed 's/#.*//' | grep '==' | tr -s ' \n' ' ')
specs="$specs $(grep -o '^pytest==[^ ]*' scripts/requirements.txt)"
[ -n "$specs" ] || { echo "fetch_wheels: no pinned diffusers block in scripts/requirements.txt" >&2; exit 1; }
mkdir -p "$dir"
# shellcheck disable=SC2086  # one argument per spec
"$python" -m pip download --disable-pip-version-check -q --only-binary=:all: --python-version "$py" \
  --implementation cp --abi "cp${py/./}" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dir" $specs
echo "fetch_wheels: $(ls "$dir"/*.whl | wc -l) wheels in $dir ($(du -sh "$dir" | cut -f1)) for Python $py"
