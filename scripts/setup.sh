#!/usr/bin/env bash
# Installs what xstage needs to build and run, and skips whatever is already present (so it also works on
# a prepared machine without network). Every step says what it does; a step that fails prints one line
# starting "setup: error:" that says what failed and what to do, and the script exits non-zero.
#
#   Debian packages   cmake, ninja, g++, CLI11, nlohmann-json, GoogleTest (apt-get, with sudo if not root)
#   CUDA toolkit      nvcc and NCCL 2.28 (nccl.h, nccl_device.h): checked, never installed
#   Python packages   scripts/requirements.txt (pinned), installed into the project's environment:
#                     .venv/ in the checkout (XSTAGE_VENV=DIR moves it), created with `python3 -m venv`;
#                     PYTHON=/path/to/python installs into that interpreter's environment instead.
#                     A line whose comment starts with "no-deps" is installed by a second
#                     `pip install --no-deps` (torch: without the CUDA libraries it would pull in).
#
# Other knobs: XSTAGE_BASE_PYTHON (the interpreter that creates the venv; default python3),
# XSTAGE_REQUIREMENTS (another pinned requirements file), PIP_INDEX_URL and the other PIP_* variables.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh

fail() { echo "setup: error: $*" >&2; exit 1; }

# --- Debian packages -----------------------------------------------------------------------------------
APT_PACKAGES=(cmake ninja-build g++ libcli11-dev nlohmann-json3-dev libgtest-dev)
missing_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing_apt+=("$pkg")
done
if ((${#missing_apt[@]})); then
  command -v apt-get >/dev/null 2>&1 ||
    fail "Debian packages missing (${missing_apt[*]}) and apt-get not found: install them with your package manager"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 ||
      fail "Debian packages missing (${missing_apt[*]}): not root and no sudo; run: apt-get install ${missing_apt[*]}"
    SUDO="sudo"
  fi
  echo "setup: installing Debian packages: ${missing_apt[*]}"
  apt_log=$(mktemp)
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_apt[@]}"; } \
      >"$apt_log" 2>&1; then
    tail -n 15 "$apt_log" >&2; rm -f "$apt_log"
    fail "apt-get could not install ${missing_apt[*]} (no network to the Debian mirrors, or no such package: see above)"
  fi
  rm -f "$apt_log"
else
  echo "setup: Debian packages present"
fi

# --- CUDA toolkit with NCCL 2.28 (checked, not installed) ----------------------------------------------
cuda_home=${CUDA_HOME:-/usr/local/cuda}
nvcc_path=$(command -v nvcc 2>/dev/null || true)
[ -n "$nvcc_path" ] || { [ -x "$cuda_home/bin/nvcc" ] && nvcc_path=$cuda_home/bin/nvcc; } ||
  fail "the CUDA toolkit was not found (no nvcc on PATH or in $cuda_home/bin): install CUDA 13.0, or set CUDA_HOME"
nccl_dirs=("$(dirname "$(dirname "$nvcc_path")")/include" "$cuda_home/include" /usr/include /usr/local/include)
nccl_found=""
for d in "${nccl_dirs[@]}"; do
  [ -f "$d/nccl_device.h" ] && { nccl_found=$d; break; }
done
[ -n "$nccl_found" ] ||
  fail "NCCL 2.28's device API (nccl_device.h) was not found in ${nccl_dirs[*]}: install NCCL 2.28 (libnccl-dev)"
echo "setup: CUDA toolkit $("$nvcc_path" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at $nvcc_path, NCCL headers in $nccl_found"

# --- Python environment ---------------------------------------------------------------------------------
requirements=${XSTAGE_REQUIREMENTS:-scripts/requirements.txt}
[ -r "$requirements" ] || fail "the requirements file $requirements cannot be read"
if [ -z "${PYTHON:-}" ]; then
  if [ ! -x "$XSTAGE_PYTHON" ]; then
    base=${XSTAGE_BASE_PYTHON:-python3}
    command -v "$base" >/dev/null 2>&1 || fail "no Python interpreter '$base' found: install Python >= 3.10 (or set PYTHON=...)"
    echo "setup: creating the project's Python environment $XSTAGE_VENV (with $base)"
    venv_log=$(mktemp)
    if ! "$base" -m venv "$XSTAGE_VENV" >"$venv_log" 2>&1; then
      cat "$venv_log" >&2; rm -f "$venv_log"; rm -rf "$XSTAGE_VENV"
      fail "'$base -m venv' could not create $XSTAGE_VENV (on Debian: apt-get install python3-venv)"
    fi
    rm -f "$venv_log"
  fi
else
  command -v "$PYTHON" >/dev/null 2>&1 || fail "PYTHON=$PYTHON is not an interpreter that can be run"
fi
"$XSTAGE_PYTHON" -m pip --version >/dev/null 2>&1 ||
  fail "pip is missing from $XSTAGE_PYTHON's environment (python -m ensurepip, or your package manager's python3-pip)"

# The pinned packages this environment lacks, or has at another version (one "name==version" per line).
# A line that is not pinned ends the check with one message, which becomes the error line.
check_err=$(mktemp)
if ! missing_pip=$("$XSTAGE_PYTHON" - "$requirements" 2>"$check_err" <<'PY'
import importlib.metadata as md, re, sys
for number, line in enumerate(open(sys.argv[1]), 1):
    spec = line.split("#", 1)[0].strip()
    if not spec:
        continue
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", spec)
    if not m:
        sys.exit(f"line {number}: '{spec}' is not pinned as name==version")
    try:
        have = md.version(m[1])
    except md.PackageNotFoundError:
        have = None
    if have != m[2]:
        no_deps = line.split("#", 1)[1].strip().startswith("no-deps") if "#" in line else False
        print(("no-deps:" if no_deps else "") + spec)
PY
); then
  # An unexpected failure (a traceback) is shown in full above the error line, which repeats its last line.
  [ "$(wc -l <"$check_err")" -le 1 ] || head -n -1 "$check_err" >&2
  why=$(tail -n 1 "$check_err"); rm -f "$check_err"
  fail "could not read the pinned packages from $requirements: ${why:-$XSTAGE_PYTHON failed without a message}"
fi
rm -f "$check_err"
# Lines marked "no-deps" are installed without their dependencies, by a second pip call.
missing_nodeps=$(sed -n 's/^no-deps://p' <<<"$missing_pip")
missing_pip=$(sed '/^no-deps:/d' <<<"$missing_pip")

# pip_install LIST [PIP OPTION...]: installs the specs in LIST (one per line) into $XSTAGE_PYTHON's environment,
# or fails with one line naming the cause.
pip_install() {
  local missing_list=${1//$'\n'/ }; shift
  local pip_log pip_debug_log why
  pip_log=$(mktemp); pip_debug_log=$(mktemp)
  # The console output (errors and warnings) is shown on failure; the cause is read from pip's debug log,
  # which alone says that the index could not be reached when pip does not retry (PIP_RETRIES=0).
  # shellcheck disable=SC2086  # one argument per pinned spec
  if ! "$XSTAGE_PYTHON" -m pip install --disable-pip-version-check --no-input -q --log "$pip_debug_log" "$@" \
      $missing_list >"$pip_log" 2>&1; then
    tail -n 15 "$pip_log" >&2
    if grep -qE "ResolutionImpossible|conflicting dependencies" "$pip_log"; then
      why="the pinned versions conflict with each other or with what the environment already has"
    elif grep -qE "Could not fetch URL .*: (connection error|There was a problem confirming the ssl certificate|.*timed out)" \
           "$pip_debug_log" ||
         grep -qiE "Failed to establish|Name or service not known|Temporary failure in name resolution|Connection refused|ConnectTimeout|Network is unreachable" \
           "$pip_log"; then
      why="the package index is unreachable (no network? set PIP_INDEX_URL for a mirror, or PIP_NO_INDEX=1 and PIP_FIND_LINKS=DIR for local wheels)"
    elif grep -qE "is not a trusted or secure host" "$pip_log"; then
      why="the package index is plain http and not trusted (use https, or set PIP_TRUSTED_HOST)"
    elif grep -qE "No matching distribution|Could not find a version" "$pip_log"; then
      why="a pinned version does not exist on the package index (or in PIP_FIND_LINKS) for this Python and platform"
    else
      why="see pip's message above"
    fi
    rm -f "$pip_log" "$pip_debug_log"
    fail "pip could not install $missing_list: $why"
  fi
  rm -f "$pip_log" "$pip_debug_log"
}

if [ -z "$missing_pip" ] && [ -z "$missing_nodeps" ]; then
  echo "setup: Python packages present in $XSTAGE_PYTHON's environment"
fi
if [ -n "$missing_pip" ]; then
  echo "setup: installing Python packages into $XSTAGE_PYTHON's environment: ${missing_pip//$'\n'/ }"
  pip_install "$missing_pip"
fi
if [ -n "$missing_nodeps" ]; then
  echo "setup: installing Python packages without their dependencies into $XSTAGE_PYTHON's environment: ${missing_nodeps//$'\n'/ }"
  pip_install "$missing_nodeps" --no-deps
fi
