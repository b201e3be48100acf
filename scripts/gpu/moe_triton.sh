#!/usr/bin/env bash
# The Triton fused-MoE baseline (tools/moe/triton_moe.py: the algorithm inference servers run) beside xstage's fused
# layer on one GPU, on the same layers: DeepSeek-V3-like (h 7168, h_inter 2048, 256 experts, top-8, balanced routing)
# at 256, 1024, 2048, 4096 and 8192 tokens, bf16 and fp8 W8A8 (configs/moe_triton_compare.json). Layer by layer the
# two take turns (Triton, then `xstage moe bench --gpus 1` on the same layer), so clock drift shows as
# round-to-round spread rather than as a difference between them. Each Triton layer is first checked against its
# float32 reference (a failed check is a failure and is not timed). Then a markdown table (tools/moe/triton_compare.py):
# Triton ms, xstage ms per implementation, Triton ms / xstage ms.
# Knobs (besides XSTAGE_BUILD and OUT: scripts/gpu/env.sh):
#   MOE_TRITON_TOKENS  comma-separated token counts (default 256,1024,2048,4096,8192)
#   MOE_TRITON_DTYPES  comma-separated dtypes (default bf16,fp8)
#   MOE_TRITON_IMPL    xstage bench --impl (default megamoe-auto,megamoe-wave-pipelined)
#   MOE_TRITON_ROUNDS  rounds over all layers (default 1; ~4 minutes each)
#   MOE_TRITON_TRIALS  timed trials per layer, both tools (default 20)
#   MOE_TRITON_SEED    the input seed of both tools (default: one fresh seed for the run)
# Needs python3 with torch and triton (torch's Linux wheels bring triton).
# Writes $OUT/moe_triton.log and $OUT/moe_triton.tar.xz (triton-r<round>-t<tokens>-<dtype>.json,
# xstage-r<round>-t<tokens>-<dtype>.json, summary.md).
#
#   bash scripts/gpu/moe_triton.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to moe_triton
W="$OUT/moe_triton"; mkdir -p "$W"
require_build "$X"
python3 -c "import torch, triton" 2>/dev/null ||
  { echo "error: python3 cannot import torch and triton: install torch (its Linux wheel brings triton)" >&2; exit 2; }
IFS=, read -r -a TOKENS <<< "${MOE_TRITON_TOKENS:-256,1024,2048,4096,8192}"
IFS=, read -r -a DTYPES <<< "${MOE_TRITON_DTYPES:-bf16,fp8}"
IMPL=${MOE_TRITON_IMPL:-megamoe-auto,megamoe-wave-pipelined}
TRIALS=${MOE_TRITON_TRIALS:-20}
SEED=${MOE_TRITON_SEED:-$(fresh_seed)}
CONFIG=configs/moe_triton_compare.json
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
date -u
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
echo "seed $SEED"

for round in $(seq 1 "${MOE_TRITON_ROUNDS:-1}"); do
  for dtype in "${DTYPES[@]}"; do
    for t in "${TOKENS[@]}"; do
      step "round $round, $t tokens, $dtype: Triton fused MoE"
      timed "triton" -- timeout 300 python3 tools/moe/triton_moe.py --h 7168 --h-inter 2048 --experts 256 --top-k 8 \
        --tokens "$t" --dtype "$dtype" --trials "$TRIALS" --seed "$SEED" --json "$W/triton-r$round-t$t-$dtype.json" ||
        failures=$((failures+1))
      step "round $round, $t tokens, $dtype: xstage moe bench --impl $IMPL"
      timed "xstage" -- timeout 300 "$X" moe bench --gpus 1 --config "$CONFIG" --filter "/t$t/balanced/$dtype" \
        --impl "$IMPL" --trials "$TRIALS" --seed "$SEED" --out "$W/xstage-r$round-t$t-$dtype.json" ||
        failures=$((failures+1))
    done
  done
done

step "summary (Triton ms / xstage ms > 1: xstage faster)"
python3 tools/moe/triton_compare.py "$W" --markdown "$W/summary.md" || failures=$((failures+1))
pack "$W" moe_triton
step "done: $failures failure(s)"
exit $((failures > 0))
