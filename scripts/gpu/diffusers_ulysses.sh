#!/usr/bin/env bash
# The "xstage" attention backend under diffusers' own context parallelism on >= 2 GPUs of one NVLink domain:
# model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P)), P = GPUS (default: every visible GPU).
# Flux.1 (joint text + image attention) and the Wan 2.1-like model (self-attention; its processor keeps the
# cross-attention to the text local), both on xstage's Ulysses layer (its default path, and fused_both), against the
# one-GPU output and timed in turn with diffusers' Ulysses on native SDPA, cuDNN and torch-flash (tools/dit/bench.py
# under torchrun).
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh): XSTAGE_WHEELS, MODELS (default flux,wan) and
# REPS as in scripts/gpu/diffusers.sh. Writes $OUT/diffusers_ulysses.log and $OUT/diffusers_ulysses.tar.xz.
#
#   GPUS=2 bash scripts/gpu/diffusers_ulysses.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to diffusers_ulysses
W="$OUT/diffusers_ulysses"; mkdir -p "$W"
require_build "$XSTAGE_C_LIBRARY"
[ -z "${XSTAGE_WHEELS:-}" ] || use_wheels "$XSTAGE_WHEELS" || exit 1
[ "$GPUS" -ge 2 ] || { echo "error: needs at least 2 GPUs (GPUS=$GPUS)" >&2; exit 3; }

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
nvidia-smi topo -m

step "Ulysses under enable_parallelism, P = $GPUS"
timed "bench P=$GPUS" -- timeout 1800 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" \
  tools/dit/bench.py --models "${MODELS:-flux,wan}" --reps "${REPS:-5}" --out "$W/diffusers_ulysses_p$GPUS.json"
rc=$?
pack "$W" diffusers_ulysses
step "done: exit $rc"
exit $rc
