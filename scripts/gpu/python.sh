#!/usr/bin/env bash
# xstage from PyTorch (docs/PYTHON.md) on a GPU machine (any number of GPUs; one is enough):
#   1. the pytest suite (tests/python: the CPU tests and, with a GPU, the GPU tests of every op), and with two or
#      more GPUs the distributed GPU tests again under torchrun, one process per GPU;
#   2. each op timed through torch beside the same kernels timed by the CLI (scripts/gpu/torch_vs_cli.sh, its own
#      log and archive beside this script's; here ROUNDS rounds, default 1);
#   3. the diffusers examples: Flux with xstage.flash_attention against SDPA, the Ulysses DiT (every visible
#      GPU), the MoE DiT (HiDream's MoE feed-forward on xstage.nn.MoE) against plain torch, at EP = 1 and over
#      every GPU.
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   XSTAGE_WHEELS  where PyPI cannot be reached: a folder with the wheels examples/diffusers/README.md lists
#                  (those this Python lacks are installed with --no-deps into /tmp/xstage-site, on PYTHONPATH,
#                  next to the machine's own torch)
#   ROUNDS         rounds of step 2 (default 1)
# Writes $OUT/python.log and $OUT/python.tar.xz (pytest.xml, the examples' JSONs), and step 2's
# $OUT/torch_vs_cli.log and $OUT/torch_vs_cli.tar.xz.
#
#   bash scripts/gpu/python.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to python
W="$OUT/python"; mkdir -p "$W"
require_build "$X" "$XSTAGE_C_LIBRARY"
if [ -n "${XSTAGE_WHEELS:-}" ]; then
  # Only the distributions this Python lacks: a wheel from that folder must not shadow a package the machine has (its
  # transformers pins huggingface-hub below 2, say).
  missing=$(python3 - "$XSTAGE_WHEELS" <<'PY'
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
  [ -z "$missing" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/xstage-site $missing
  export PYTHONPATH="$PYTHONPATH:/tmp/xstage-site"
fi
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

ROUNDS=${ROUNDS:-1} bash scripts/gpu/torch_vs_cli.sh || failures=$((failures+1))

step "diffusers examples"
timed "flux + flash_attention" -- timeout 300 python3 examples/diffusers/dit_attention.py --out "$W/dit_attention.json" \
  || failures=$((failures+1))
timed "ulysses DiT" -- timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" examples/diffusers/dit_ulysses.py \
  --out "$W/dit_ulysses_p$GPUS.json" || failures=$((failures+1))
timed "MoE DiT" -- timeout 300 python3 examples/diffusers/dit_moe.py --out "$W/dit_moe_ep1.json" || failures=$((failures+1))
if [ "$GPUS" -ge 2 ]; then
  timed "MoE DiT, EP = $GPUS" -- timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" \
    examples/diffusers/dit_moe.py --out "$W/dit_moe_ep$GPUS.json" || failures=$((failures+1))
fi

pack "$W" python
step "done: $failures failure(s)"
exit $((failures > 0))
