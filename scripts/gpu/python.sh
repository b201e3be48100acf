#!/usr/bin/env bash
# On a GPU machine: xstage from PyTorch (docs/PYTHON.md). Needs the C library (XSTAGE_C_LIBRARY, default
# .carry/python/libxstage_c.so, else build/libxstage_c.so) and, where PyPI cannot be reached, the wheels
# scripts/fetch_wheels.sh downloads, in $XSTAGE_WHEELS (env.sh's use_wheels: those this Python lacks).
#   1. the pytest suite (tests/python: the CPU tests and, with a GPU, the GPU tests of every op), and with two or
#      more GPUs the distributed GPU tests again under torchrun, one process per GPU;
#   2. each op timed through torch beside the same kernels timed by the CLI (scripts/gpu/torch_vs_cli.sh; here
#      $ROUNDS rounds, default 1);
#   3. the diffusers examples (examples/diffusers/: the attention backend, swap_moe, and with two or more GPUs
#      the Ulysses backend under enable_parallelism), each printing its error against diffusers' own.
# Everything lands in ${OUT:-out}/: python.log and python.tar.gz (the JSONs and logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-out}; W="$OUT/python"; mkdir -p "$W"
exec > >(tee "$OUT/python.log") 2>&1
export PYTHONUNBUFFERED=1
X="$XSTAGE_BIN_DIR/xstage"
GPUS=${GPUS:-$(nvidia-smi -L | grep -c '^GPU')}
LIB=${XSTAGE_C_LIBRARY:-$( [ -f .carry/python/libxstage_c.so ] && echo .carry/python/libxstage_c.so || echo build/libxstage_c.so )}
export XSTAGE_C_LIBRARY=$PWD/$LIB PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
[ -z "${XSTAGE_WHEELS:-}" ] || use_wheels "$XSTAGE_WHEELS" || exit 1
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"

step "pytest tests/python"
timed "pytest" -- timeout 600 python3 -m pytest -q -rs -p no:cacheprovider -o junit_family=legacy tests/python --junitxml "$W/pytest.xml" || failures=$((failures+1))
if [ "$GPUS" -ge 2 ]; then
  step "the distributed GPU tests over $GPUS ranks (torchrun)"
  timed "pytest torchrun" -- timeout 600 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" -m pytest -q -rs \
    -p no:cacheprovider tests/python/gpu/test_distributed_gpu.py || failures=$((failures+1))
fi

ROUNDS=${ROUNDS:-1} OUT="$W" bash scripts/gpu/torch_vs_cli.sh || failures=$((failures+1))

step "diffusers examples (the three one-line switches; the measurements: scripts/gpu/diffusers.sh)"
timed "attention" -- timeout 300 python3 examples/diffusers/attention.py || failures=$((failures+1))
timed "moe" -- timeout 300 python3 examples/diffusers/moe.py || failures=$((failures+1))
if [ "$GPUS" -ge 2 ]; then
  timed "ulysses over $GPUS GPUs" -- timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" \
    examples/diffusers/ulysses.py || failures=$((failures+1))
fi

tar -C "$W" -czf "$OUT/python.tar.gz" . && rm -rf "$W"
step "done: $failures failure(s)"
exit $((failures > 0))
