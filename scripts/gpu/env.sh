# shellcheck shell=bash
# Sourced by every scripts/gpu/*.sh (from the repository root): what they share.
#
#   XSTAGE_BUILD  the build directory the binaries come from (default: build): $XSTAGE_BUILD/xstage, the GPU test
#                 programs in $XSTAGE_BUILD/tests/, the C library $XSTAGE_BUILD/libxstage_c.so (exported as
#                 XSTAGE_C_LIBRARY for the Python package, with PYTHONPATH=python)
#   OUT           the folder every output goes to (default: out): <script>.log, the whole log, and
#                 <script>.tar.xz, the raw files (results/README.md)
#   GPUS          the GPUs (ranks) a multi-GPU step uses (default: every visible GPU)
#
# Multicast (NVLS) stays off: it can take down a shared host.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
XSTAGE_BUILD=${XSTAGE_BUILD:-build}
OUT=${OUT:-out}
# shellcheck disable=SC2034  # X: the scripts' xstage
X="$XSTAGE_BUILD/xstage"
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
XSTAGE_C_LIBRARY=$(realpath -m "$XSTAGE_BUILD/libxstage_c.so")
export XSTAGE_C_LIBRARY PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# The binaries link libnccl.so.2; on machines where NCCL comes from PyPI, point the loader at it.
if NCCL_PIP_LIB=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null); then
  export LD_LIBRARY_PATH="$NCCL_PIP_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# cuBLAS (the MoE baseline links libcublas.so.13): the pip wheel next to torch, else the toolkit's.
if CUBLAS_PIP_LIB=$(python3 -c "import glob, os, site; c = [os.path.dirname(p) for d in site.getsitepackages() for p in glob.glob(os.path.join(d, 'nvidia', '**', 'libcublas.so.13'), recursive=True)]; print(c[0]) if c else exit(1)" 2>/dev/null); then
  export LD_LIBRARY_PATH="$CUBLAS_PIP_LIB:$LD_LIBRARY_PATH"
elif [ -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
fi
# log_to NAME: everything the script prints from here on also goes to $OUT/NAME.log (OUT created).
log_to() { mkdir -p "$OUT" && exec > >(tee "$OUT/$1.log") 2>&1; }
# pack DIR NAME: DIR's files into $OUT/NAME.tar.xz (xz -9e: results/ keeps archives as they are), then DIR removed.
pack() { tar -C "$1" -cf - . | xz -9e -T0 > "$OUT/$2.tar.xz" && rm -rf "$1"; }
# require_build: stop with a clear message when the binaries are not there.
require_build() {
  local f
  for f in "$@"; do
    [ -e "$f" ] || { echo "error: $f not found: build first (scripts/build.sh) or set XSTAGE_BUILD to a build directory" >&2; exit 2; }
  done
}

# fresh_seed: a random seed the CLI's --seed takes (0 to 2^63 - 1): 56 random bits.
fresh_seed() { od -An -N7 -tu8 /dev/urandom | tr -d ' '; }

# Log helpers: a section header, a command with its wall time, and a command that must fail with a given exit
# status (bad input: 2, a machine that cannot run it: 3) and message.
step() { echo; echo "=== $* ==="; }
timed() {  # timed LABEL -- command...: runs it and prints its wall time
  local label=$1; shift 2
  local t0 t1 rc; t0=$(date +%s.%N); "$@"; rc=$?; t1=$(date +%s.%N)
  echo "$label wall time: $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s (exit $rc)"; return $rc
}
# expect_status WANT PATTERN -- command...: 0 when the command exits with WANT and prints PATTERN, else 1. The command
# sees the status wanted in XSTAGE_EXPECTED_STATUS: the GPU scripts' dry run on a machine without a GPU
# (tests/repo/tools_test.sh, case gpu_scripts_dry) checks it against what xstage answers.
expect_status() {
  local want=$1 pattern=$2; shift 3
  local text rc; text=$(XSTAGE_EXPECTED_STATUS=$want "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$pattern" <<<"$text"; then echo "ok   exit $rc: $(tail -n1 <<<"$text")"; return 0; fi
  echo "FAILED: wanted exit $want with '$pattern', got $rc: $text"; return 1
}

# use_wheels DIR: makes the wheels in DIR that this Python lacks importable (pip install --no-deps --target a
# scratch folder appended to PYTHONPATH): diffusers and its requirements on a machine without network, next to
# the machine's own torch. Only what is missing: a carried wheel must not shadow a package the machine has (its
# transformers pins huggingface-hub below 2, say). scripts/fetch_wheels.sh downloads them on a networked machine.
use_wheels() {
  local dir=$1 site=/tmp/xstage-site missing
  [ -d "$dir" ] || { echo "use_wheels: no folder $dir"; return 1; }
  missing=$(python3 - "$dir" <<'PY'
import glob, importlib.metadata as md, os, re, sys
for w in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    name = re.split(r"-\d", os.path.basename(w), maxsplit=1)[0]
    try:
        md.version(name)
    except md.PackageNotFoundError:
        print(w)
PY
)
  echo "installing the wheels this Python lacks: $(echo "$missing" | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
  [ -z "$missing" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" $missing || return 1
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$site"
}
