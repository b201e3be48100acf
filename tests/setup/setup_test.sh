#!/usr/bin/env bash
# scripts/setup.sh in a throw-away environment: a venv in a temporary directory, a pinned requirements
# file naming two tiny wheels built here, no network (a local find-links folder, or an index at a closed
# port). The project's .venv, the pip cache and the user's pip configuration are left alone.
#
#   tests/setup/setup_test.sh CASE [SOURCE_DIR]      (exit 0: passed, 77: skipped, other: failed)
#
# The Debian step is passed with a stub dpkg that reports every package installed, and the CUDA step with a
# fake toolkit (an nvcc that prints its release, an empty nccl_device.h): neither is what is tested here,
# and this way the test runs on machines without the toolkit. Every failure case checks that setup.sh
# exits non-zero with exactly one "setup: error:" line on stderr, as its last line, naming the cause.
set -euo pipefail

case_name=${1:?usage: setup_test.sh CASE [SOURCE_DIR]}
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
setup=$src/scripts/setup.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/xstage-setup-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

die() { echo "FAIL ($case_name): $*" >&2; exit 1; }

# The interpreter that creates the venvs (the real one, not a shim). Without venv + ensurepip (Debian's
# python3-venv) setup.sh cannot make its environment anywhere on this machine: nothing to test here.
base_python=$(python3 -c 'import sys; print(sys.executable)') || die "no python3 to run the test with"
if [ "$case_name" != fails_no_cuda ] && ! "$base_python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "SKIP ($case_name): $base_python has no venv/ensurepip module (python3-venv)"; exit 77
fi

# --- two pinned packages as wheels (one name with a dash, to exercise name normalisation) ---------------
mkdir -p "$tmp/wheels"
"$base_python" - "$tmp/wheels" <<'PY'
import base64, hashlib, sys, zipfile

def wheel(dist, module, version, outdir):
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: xstage-setup-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(f"{outdir}/{stem}-{version}-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)

wheel("xstage-probe", "xstage_probe", "1.0", sys.argv[1])
wheel("xstageprobetwo", "xstageprobetwo", "2.1.0", sys.argv[1])
PY
printf '# pinned, as in scripts/requirements.txt\nxstage-probe==1.0   # with a comment\n\nxstageprobetwo==2.1.0\n' >"$tmp/req.txt"

# --- a PATH without nvcc, a stub dpkg, a fake CUDA toolkit ---------------------------------------------
mkdir -p "$tmp/bin" "$tmp/cuda/bin" "$tmp/cuda/include"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/dpkg"
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.48"\n' >"$tmp/cuda/bin/nvcc"
chmod +x "$tmp/bin/dpkg" "$tmp/cuda/bin/nvcc"
: >"$tmp/cuda/include/nccl_device.h"
clean_path=$tmp/bin
IFS=: read -r -a path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
  [ -n "$d" ] && [ ! -e "$d/nvcc" ] && [ "$d" != /usr/local/cuda/bin ] && clean_path+=":$d"
done

# run_setup NAME [VAR=VALUE...]: setup.sh with only the PIP_* variables given here (none from the caller's
# environment or pip configuration); stdout, stderr and the exit status into $tmp/NAME.{out,err,rc}.
run_setup() {
  local name=$1; shift
  local rc=0
  env -u PYTHON -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_NO_INDEX -u PIP_REQUIRE_VIRTUALENV \
      -u PIP_USER -u PIP_TARGET -u PIP_PREFIX -u PIP_CONSTRAINT -u PIP_RETRIES -u PIP_TIMEOUT -u PIP_DEFAULT_TIMEOUT \
      -u XSTAGE_BASE_PYTHON -u VIRTUAL_ENV -u PYTHONPATH -u PYTHONHOME \
      PATH="$clean_path" CUDA_HOME="$tmp/cuda" PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 \
      PIP_DISABLE_PIP_VERSION_CHECK=1 XSTAGE_BASE_PYTHON="$base_python" \
      XSTAGE_VENV="$tmp/venv" XSTAGE_REQUIREMENTS="$tmp/req.txt" "$@" \
      "$setup" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null || rc=$?
  echo "$rc" >"$tmp/$name.rc"
  echo "--- setup.sh ($name) exit $rc; stdout:"; cat "$tmp/$name.out"
  echo "--- stderr:"; cat "$tmp/$name.err"
}
offline=(PIP_NO_INDEX=1 PIP_FIND_LINKS="$tmp/wheels")

# The failure cases after the venv step start from a venv that borrows the base interpreter's pip (0.1 s
# instead of 3 s for one with its own pip); setup.sh then takes it as the existing project environment.
# Where the base interpreter has no pip, setup.sh creates the venv itself as in the other cases.
prepare_venv() {
  if "$base_python" -m pip --version >/dev/null 2>&1; then
    "$base_python" -m venv --without-pip --system-site-packages "$tmp/venv" || die "could not create a venv"
  fi
}

expect_success() {
  [ "$(cat "$tmp/$1.rc")" = 0 ] || die "setup.sh exited $(cat "$tmp/$1.rc"), expected 0"
  ! grep -q "setup: error:" "$tmp/$1.err" || die "setup.sh succeeded but printed an error line"
}

# expect_failure NAME PHRASE: non-zero, exactly one error line, it is stderr's last line, it contains PHRASE.
expect_failure() {
  local name=$1 phrase=$2
  [ "$(cat "$tmp/$name.rc")" != 0 ] || die "setup.sh exited 0, expected a failure ($phrase)"
  local n
  n=$(grep -c "^setup: error:" "$tmp/$name.err" || true)
  [ "$n" = 1 ] || die "expected exactly one 'setup: error:' line on stderr, found $n (a silent exit if 0)"
  tail -n 1 "$tmp/$name.err" | grep -q "^setup: error:" || die "the 'setup: error:' line is not stderr's last line"
  grep "^setup: error:" "$tmp/$name.err" | grep -qF -- "$phrase" || die "the error line does not say '$phrase'"
}

# The probes as the venv sees them.
expect_installed() {
  local got
  got=$("$tmp/venv/bin/python" -c 'import xstage_probe, xstageprobetwo; print(xstage_probe.VERSION, xstageprobetwo.VERSION)') ||
    die "the pinned packages cannot be imported from $tmp/venv"
  [ "$got" = "1.0 2.1.0" ] || die "installed versions are '$got', expected '1.0 2.1.0'"
}

case $case_name in
  installs_into_empty_env)
    run_setup first "${offline[@]}"
    expect_success first
    grep -q "creating the project's Python environment $tmp/venv" "$tmp/first.out" || die "no venv creation reported"
    grep -q "installing Python packages .*xstage-probe==1.0 xstageprobetwo==2.1.0" "$tmp/first.out" ||
      die "the install of both pinned packages is not reported"
    expect_installed
    ;;
  skips_complete_env)
    run_setup first "${offline[@]}"
    expect_success first
    expect_installed
    # The second run must not call pip install: its index does not answer, so an install would fail.
    run_setup second PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=0 PIP_TIMEOUT=2
    expect_success second
    grep -q "Python packages present in $tmp/venv/bin/python's environment" "$tmp/second.out" ||
      die "the second run does not say the packages are present"
    ! grep -q "installing Python packages" "$tmp/second.out" || die "the second run installs again"
    ! grep -q "creating the project's Python environment" "$tmp/second.out" || die "the second run creates the venv again"
    # A pin moved to a version the environment lacks is not taken as present: setup.sh tries to install it.
    sed -i 's/^xstageprobetwo==2.1.0/xstageprobetwo==2.2/' "$tmp/req.txt"
    run_setup third "${offline[@]}"
    grep -q "installing Python packages .*: xstageprobetwo==2.2\$" "$tmp/third.out" || die "a moved pin is not installed"
    expect_failure third "a pinned version does not exist"
    ;;
  fails_unreachable_index)
    prepare_venv
    run_setup run PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=0 PIP_TIMEOUT=2
    expect_failure run "the package index is unreachable"
    ;;
  fails_missing_version)
    prepare_venv
    sed -i 's/^xstage-probe==1.0/xstage-probe==9.9.9/' "$tmp/req.txt"
    run_setup run "${offline[@]}"
    expect_failure run "a pinned version does not exist"
    ;;
  fails_no_cuda)
    run_setup run "${offline[@]}" CUDA_HOME=/nonexistent
    expect_failure run "the CUDA toolkit was not found"
    [ ! -e "$tmp/venv" ] || die "setup.sh went on past the CUDA check"
    ;;
  fails_no_nccl)
    # setup.sh also looks in /usr/include and /usr/local/include: where those have NCCL, nothing to test.
    for d in /usr/include /usr/local/include; do
      [ ! -f "$d/nccl_device.h" ] || { echo "SKIP ($case_name): $d/nccl_device.h is installed"; exit 77; }
    done
    rm "$tmp/cuda/include/nccl_device.h"
    run_setup run "${offline[@]}"
    expect_failure run "nccl_device.h) was not found"
    ;;
  fails_no_pip)
    "$base_python" -m venv --without-pip "$tmp/nopip" || die "could not create a venv without pip"
    run_setup run "${offline[@]}" PYTHON="$tmp/nopip/bin/python"
    expect_failure run "pip is missing from $tmp/nopip/bin/python's environment"
    ;;
  fails_unpinned_requirement)
    prepare_venv
    printf 'xstage-probe>=1.0\n' >"$tmp/req.txt"
    run_setup run "${offline[@]}"
    expect_failure run "req.txt: line 1: 'xstage-probe>=1.0' is not pinned as name==version"
    ;;
  *)
    die "unknown case (installs_into_empty_env, skips_complete_env, fails_unreachable_index, fails_missing_version, fails_no_cuda, fails_no_nccl, fails_no_pip, fails_unpinned_requirement)"
    ;;
esac
echo "PASS ($case_name)"
