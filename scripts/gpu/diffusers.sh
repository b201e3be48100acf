#!/usr/bin/env bash
# On one GPU: xstage inside diffusers (docs/PYTHON.md, "diffusers"). Needs the C library (XSTAGE_C_LIBRARY, default
# ${BUILD_DIR:-build}/libxstage_c.so) and diffusers: installed, or its wheels in XSTAGE_WHEELS=DIR
# (scripts/fetch_wheels.sh makes that folder on a machine with network).
#   1. tests/python/gpu/test_diffusers_gpu.py: the backend against diffusers' default on small models, masks,
#      the ops without a process group, backward raising, swap_moe against diffusers' MoE module;
#   2. tools/diffusers_bench.py: Flux.1 (full depth, 1024 x 1024), a Wan 2.1-like video model (32760 tokens, self-
#      and cross-attention), Qwen-Image (padded text), LTX-Video (head_dim 64), HunyuanVideo (32640 tokens), SD3
#      (recorded as not dispatching) from configs with random weights: rel L2 against diffusers' default and one
#      forward timed in turn with every attention backend that runs; HiDream with swap_moe bf16 and fp8 against
#      diffusers' MoE module. MODELS=flux,wan ... runs a subset (one run of all of them takes ~10 minutes).
# Raw JSON and logs land in ${OUT:-out}/diffusers/.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-out}; W="$OUT/diffusers"; mkdir -p "$W"
exec > >(tee "$W/diffusers.log") 2>&1
export PYTHONUNBUFFERED=1
export XSTAGE_C_LIBRARY=$(realpath "${XSTAGE_C_LIBRARY:-${BUILD_DIR:-build}/libxstage_c.so}") PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
[ -z "${XSTAGE_WHEELS:-}" ] || use_wheels "$XSTAGE_WHEELS" || exit 1
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
python3 -c "import torch, diffusers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'diffusers', diffusers.__version__)" \
  || { echo "diffusers does not import: set XSTAGE_WHEELS (scripts/fetch_wheels.sh)"; exit 1; }

step "GPU tests of xstage.diffusers"
timed "pytest" -- timeout 900 python3 -m pytest -q -rs -p no:cacheprovider tests/python/gpu/test_diffusers_gpu.py \
  --junitxml "$W/pytest.xml" || failures=$((failures+1))

step "diffusers models: xstage against every attention backend, and swap_moe"
timed "diffusers_bench" -- python3 tools/diffusers_bench.py ${MODELS:+--models "$MODELS"} --reps "${REPS:-5}" \
  --out "$W/diffusers_bench.json" || failures=$((failures+1))

step "done: $failures failure(s)"
exit $((failures > 0))
