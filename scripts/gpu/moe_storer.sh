#!/usr/bin/env bash
# Where the MegaMoE combine storer's time goes, on one GPU (EP = 1), from an instrumented build (CMake
# -DXSTAGE_MOE_STATS=ON; targets xstage and xstage_storer_bench):
#   1. xstage_storer_bench: the storer's store pattern alone (1 CTA and every SM, 1-2 warps, 256 and 512-byte
#      rows, each store loop and fence / release variant), every stored byte checked;
#   2. a quick `xstage moe check` of the instrumented kernel (the storer it traces is the one that is right);
#   3. per-tile traces of the DeepSeek-V3-like layer (4096 tokens, bf16 and fp8, expert-wave and interleaved)
#      and the fine-grained layer (h4096-i256-e64-k8, 6144 tokens, bf16 and fp8, expert-wave), then
#      tools/moe/trace_figures.py: table2.md (T_RS, T_mma, Δt) and phases.md (each storer warp's T_RS split
#      into RowSource loads, store issue, fence, release: median and p90).
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh): MOE_STORER_SEED (default: a fresh seed).
# Writes $OUT/moe_storer.log and $OUT/moe_storer.tar.xz (storer_bench.json, check.json, the bench JSONs with
# the kernel's counters, trace/*.json.xz, trace_figures/).
#
#   XSTAGE_BUILD=build-stats bash scripts/gpu/moe_storer.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to moe_storer
W="$OUT/moe_storer"; mkdir -p "$W"
BENCH="$XSTAGE_BUILD/xstage_storer_bench"
require_build "$X" "$BENCH"
SEED=${MOE_STORER_SEED:-$(fresh_seed)}
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
date -u
echo "seed $SEED"

step "the storer's store pattern alone (xstage_storer_bench)"
timed "storer bench" -- timeout 120 "$BENCH" --tiles 64 --h 7168 --seed 1 --out "$W/storer_bench.json" || failures=$((failures+1))

step "the instrumented kernel is correct (quick check)"
timed "check" -- timeout 200 "$X" moe check --gpus 1 --cases k2-balanced,h384 --impl megamoe-wave,megamoe-interleaved \
  --out "$W/check.json" || failures=$((failures+1))

step "per-tile traces with the storer's phases"
timed "trace DeepSeek-V3-like" -- timeout 300 "$X" moe bench --gpus 1 \
  --filter "deepseek-v3:h7168-i2048-e256-k8/t4096/balanced" --impl megamoe-wave,megamoe-interleaved --trials 5 --seed "$SEED" \
  --trace "$W/trace" --out "$W/trace_dsv3_bench.json" || failures=$((failures+1))
timed "trace fine-grained" -- timeout 300 "$X" moe bench --gpus 1 --config configs/moe_heldout.json \
  --filter "h4096-i256-e64-k8/t6144/balanced" --impl megamoe-wave --trials 5 --seed "$SEED" \
  --trace "$W/trace" --out "$W/trace_fine_bench.json" || failures=$((failures+1))
python3 tools/moe/trace_figures.py "$W/trace" --out "$W/trace_figures" || failures=$((failures+1))
xz -9 -T0 "$W"/trace/*.json

pack "$W" moe_storer
step "done: $failures failure(s)"
exit $((failures > 0))
