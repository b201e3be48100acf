#!/usr/bin/env bash
# On >= 2 GPUs of one NVLink domain: the "xstage" attention backend under diffusers' own context parallelism,
# model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P)), P = every visible GPU (GPUS=2 for two):
# Flux.1 (joint text + image attention) and the Wan 2.1-like model (self-attention; its processor keeps the
# cross-attention to the text local), both on xstage's fused Ulysses layer, against the one-GPU output and timed in turn
# with diffusers' Ulysses on native SDPA, cuDNN and torch-flash (tools/diffusers_bench.py under torchrun).
# The same environment as scripts/gpu/diffusers.sh (XSTAGE_C_LIBRARY, XSTAGE_WHEELS). Raw JSON and logs land in
# ${OUT:-out}/diffusers_ulysses/.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-out}; W="$OUT/diffusers_ulysses"; mkdir -p "$W"
exec > >(tee "$W/diffusers_ulysses.log") 2>&1
export PYTHONUNBUFFERED=1
export XSTAGE_C_LIBRARY=$(realpath "${XSTAGE_C_LIBRARY:-${BUILD_DIR:-build}/libxstage_c.so}") PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
[ -z "${XSTAGE_WHEELS:-}" ] || use_wheels "$XSTAGE_WHEELS" || exit 1
GPUS=${GPUS:-$(nvidia-smi -L | grep -c '^GPU')}
[ "$GPUS" -ge 2 ] || { echo "diffusers_ulysses: needs at least 2 GPUs (found $GPUS)"; exit 3; }

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
nvidia-smi topo -m

step "Ulysses under enable_parallelism, P = $GPUS"
timed "diffusers_bench P=$GPUS" -- timeout 1800 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" \
  tools/diffusers_bench.py --models "${MODELS:-flux,wan}" --reps "${REPS:-5}" --out "$W/diffusers_ulysses_p$GPUS.json"
rc=$?
step "done: exit $rc"
exit $rc
