#!/usr/bin/env bash
# xstage from PyTorch (docs/PYTHON.md) on a GPU machine (any number of GPUs; one is enough):
#   1. the pytest suite (tests/python: the CPU tests and, with a GPU, the GPU tests of every op), and with two or
#      more GPUs the distributed GPU tests again under torchrun, one process per GPU; where libxstage_torch.so is
#      built (the ops' C++ kernels), the GPU tests once more on the ctypes path (XSTAGE_TORCH_LIBRARY=none);
#   2. each op timed through torch beside the same kernels timed by the CLI (scripts/gpu/torch_vs_cli.sh, its own
#      log and archive beside this script's; here ROUNDS rounds, default 1);
#   3. the diffusers examples (examples/diffusers/: the attention backend, swap_moe, and with two or more GPUs
#      the Ulysses backend under enable_parallelism), each printing its error against diffusers' own (the
#      measurements: scripts/gpu/diffusers.sh).
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   XSTAGE_WHEELS  where PyPI cannot be reached: a folder with the wheels scripts/fetch_wheels.sh downloads
#                  (env.sh's use_wheels installs those this Python lacks)
#   ROUNDS         rounds of step 2 (default 1)
# Writes $OUT/python.log and $OUT/python.tar.xz (pytest.xml, pytest_ctypes.xml), and step 2's
# $OUT/torch_vs_cli.log and $OUT/torch_vs_cli.tar.xz.
#
#   bash scripts/gpu/python.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to python
W="$OUT/python"; mkdir -p "$W"
require_build "$X" "$XSTAGE_C_LIBRARY"
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
if [ -e "$XSTAGE_BUILD/libxstage_torch.so" ]; then
  step "the GPU tests on the ctypes path (XSTAGE_TORCH_LIBRARY=none; the runs above took libxstage_torch.so)"
  XSTAGE_TORCH_LIBRARY=none timed "pytest, ctypes path" -- timeout 600 python3 -m pytest -q -rs -p no:cacheprovider \
    -o junit_family=legacy tests/python/gpu --junitxml "$W/pytest_ctypes.xml" || failures=$((failures+1))
  if [ "$GPUS" -ge 2 ]; then
    XSTAGE_TORCH_LIBRARY=none timed "pytest torchrun, ctypes path" -- timeout 600 python3 -m torch.distributed.run --standalone \
      --nproc-per-node "$GPUS" -m pytest -q -rs -p no:cacheprovider tests/python/gpu/test_distributed_gpu.py || failures=$((failures+1))
  fi
else
  echo "no $XSTAGE_BUILD/libxstage_torch.so (this Python's torch is older than 2.10, or it was not built): the runs above took the ctypes path"
fi

ROUNDS=${ROUNDS:-1} bash scripts/gpu/torch_vs_cli.sh || failures=$((failures+1))

step "diffusers examples"
timed "attention" -- timeout 300 python3 examples/diffusers/attention.py || failures=$((failures+1))
timed "moe" -- timeout 300 python3 examples/diffusers/moe.py || failures=$((failures+1))
if [ "$GPUS" -ge 2 ]; then
  timed "ulysses over $GPUS GPUs" -- timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" \
    examples/diffusers/ulysses.py || failures=$((failures+1))
fi

pack "$W" python
step "done: $failures failure(s)"
exit $((failures > 0))
