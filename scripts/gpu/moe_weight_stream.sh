#!/usr/bin/env bash
# How close the fused layer streams its expert weights to HBM speed where reading them once bounds it, on one GPU
# (EP = 1): the DeepSeek-V3-like layer (h 7168, h_inter 2048, 256 experts, top-8, balanced routing;
# configs/moe_triton_compare.json) at 256, 1024 and 2048 tokens (8, 32, 64 rows per expert), bf16 and fp8 W8A8,
# `xstage moe bench --hbm-reference`: after each layer's implementations, a streaming read of the same expert weight
# buffers on the same GPU (docs/MOE.md, "The HBM reference"). Each fused result line is followed by the layer's
# weight_bytes / median time as a fraction of that read's bandwidth; the JSON has weight_bytes, hbm_read_GBps and
# weight_stream_fraction per fused result.
# Knobs (besides XSTAGE_BUILD and OUT: scripts/gpu/env.sh):
#   MOE_WEIGHT_STREAM_TOKENS  comma-separated token counts (default 256,1024,2048)
#   MOE_WEIGHT_STREAM_IMPL    bench --impl (default megamoe-auto,megamoe-wave-pipelined)
#   MOE_WEIGHT_STREAM_TRIALS  timed trials per layer and per read (default 20)
#   MOE_WEIGHT_STREAM_SEED    the input seed (default: a fresh seed)
# Writes $OUT/moe_weight_stream.log and $OUT/moe_weight_stream.tar.xz (bench.json).
#
#   bash scripts/gpu/moe_weight_stream.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to moe_weight_stream
W="$OUT/moe_weight_stream"; mkdir -p "$W"
require_build "$X"
IFS=, read -r -a TOKENS <<< "${MOE_WEIGHT_STREAM_TOKENS:-256,1024,2048}"
FILTER=$(printf "/t%s/balanced," "${TOKENS[@]}"); FILTER=${FILTER%,}
IMPL=${MOE_WEIGHT_STREAM_IMPL:-megamoe-auto,megamoe-wave-pipelined}
SEED=${MOE_WEIGHT_STREAM_SEED:-$(fresh_seed)}
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv
date -u
echo "seed $SEED"

step "xstage moe bench --hbm-reference (--filter $FILTER, --impl $IMPL)"
timed "bench" -- timeout 600 "$X" moe bench --gpus 1 --config configs/moe_triton_compare.json --filter "$FILTER" \
  --impl "$IMPL" --trials "${MOE_WEIGHT_STREAM_TRIALS:-20}" --seed "$SEED" --hbm-reference --out "$W/bench.json" ||
  failures=$((failures+1))

pack "$W" moe_weight_stream
step "done: $failures failure(s)"
exit $((failures > 0))
