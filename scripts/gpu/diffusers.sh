#!/usr/bin/env bash
# xstage inside diffusers (docs/PYTHON.md, "diffusers") on one GPU:
#   1. tests/python/gpu/test_diffusers_gpu.py: the backend against diffusers' default on small models, masks,
#      the ops without a process group, backward raising, swap_moe against diffusers' MoE module;
#   2. tools/dit/bench.py: Flux.1 (full depth, 1024 x 1024), a Wan 2.1-like video model (32760 tokens, self- and
#      cross-attention), Qwen-Image (padded text), LTX-Video (head_dim 64), HunyuanVideo (32640 tokens), SD3
#      (recorded as not dispatching) from configs with random weights: rel L2 against diffusers' default and one
#      forward timed in turn with every attention backend that runs; HiDream with swap_moe bf16 and fp8 against
#      diffusers' MoE module.
# Knobs (besides XSTAGE_BUILD and OUT: scripts/gpu/env.sh):
#   XSTAGE_WHEELS  where diffusers is not installed and PyPI cannot be reached: a folder with the wheels
#                  scripts/fetch_wheels.sh downloads (env.sh's use_wheels installs those this Python lacks)
#   MODELS         a subset for step 2, e.g. MODELS=flux,wan (default: all; one run of all takes ~10 minutes)
#   REPS           timings per backend in step 2 (default 5)
# Writes $OUT/diffusers.log and $OUT/diffusers.tar.xz (pytest.xml, diffusers_bench.json).
#
#   bash scripts/gpu/diffusers.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to diffusers
W="$OUT/diffusers"; mkdir -p "$W"
require_build "$XSTAGE_C_LIBRARY"
[ -z "${XSTAGE_WHEELS:-}" ] || use_wheels "$XSTAGE_WHEELS" || exit 1
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
python3 -c "import torch, diffusers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'diffusers', diffusers.__version__)" \
  || { echo "error: diffusers does not import: set XSTAGE_WHEELS (scripts/fetch_wheels.sh)" >&2; exit 2; }

step "GPU tests of xstage.diffusers"
timed "pytest" -- timeout 900 python3 -m pytest -q -rs -p no:cacheprovider tests/python/gpu/test_diffusers_gpu.py \
  --junitxml "$W/pytest.xml" || failures=$((failures+1))

step "diffusers models: xstage against every attention backend, and swap_moe"
timed "bench" -- python3 tools/dit/bench.py ${MODELS:+--models "$MODELS"} --reps "${REPS:-5}" \
  --out "$W/diffusers_bench.json" || failures=$((failures+1))

pack "$W" diffusers
step "done: $failures failure(s)"
exit $((failures > 0))
