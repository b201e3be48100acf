#!/usr/bin/env bash
# The MegaMoE schedule chosen per layer (megamoe-auto) judged on configurations it was not tuned on, on a GPU
# machine (expert parallelism over GPUS, default every visible GPU; one GPU is EP = 1):
#   1. `xstage moe check --impl megamoe-auto`: the chosen configurations are correct (every check case);
#   2. per grid file of MOE_SCHED_CONFIGS (default: both held-out lists and configs/moe_grid.json), `xstage
#      moe bench` with every fused schedule and megamoe-auto, then the same with M-pairs (--cluster-m 2), one seed
#      for both, into <grid name>/bench.json and bench-m-pairs.json: the six variants the rule chooses among, and
#      what it chose, in the same run (tools/moe/auto_eval.py <that folder> <the committed plan> scores it, or the archive with --folder <its name>);
#   3. the interleaved schedule's lead D swept on the DeepSeek-V3-like layer (D_knee is the default);
#   4. with an instrumented build (XSTAGE_STATS_BUILD, built with CMake -DXSTAGE_MOE_STATS=ON): the
#      per-tile traces of the fine-grained held-out shape and the DeepSeek-V3-like layer under expert-wave and
#      interleaved, and Fig. 9 / Fig. 10 / Table 2 from them (tools/moe/trace_figures.py; needs matplotlib).
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   MOE_SCHED_CONFIGS  the grid files (default: configs/moe_heldout.json configs/moe_heldout2.json configs/moe_grid.json; one at a time
#                      where a command's time is limited)
#   MOE_SCHED_TRIALS   trials per configuration (default 20)
#   XSTAGE_STATS_BUILD the build directory of the instrumented build (step 4; unset: no traces)
# Writes $OUT/moe_schedules.log and $OUT/moe_schedules.tar.xz (check_auto.json, <grid name>/bench*.json, lead/,
# trace/, trace_figures/).
#
#   bash scripts/gpu/moe_schedules.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to moe_schedules
W="$OUT/moe_schedules"; mkdir -p "$W"
require_build "$X"
TRIALS=${MOE_SCHED_TRIALS:-20}
FUSED=megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
date -u

step "xstage moe check --impl megamoe-auto (EP = $GPUS)"
timed "check auto" -- timeout 300 "$X" moe check --gpus "$GPUS" --impl megamoe-auto --out "$W/check_auto.json" || failures=$((failures+1))

mkdir -p "$W/lead"
SEED=$(fresh_seed)
for grid in ${MOE_SCHED_CONFIGS:-configs/moe_heldout.json configs/moe_heldout2.json configs/moe_grid.json}; do
  name=$(basename "$grid" .json); mkdir -p "$W/$name"
  step "$grid: every fused schedule and megamoe-auto, seed $SEED"
  timed "bench $name" -- timeout 1200 "$X" moe bench --gpus "$GPUS" --config "$grid" --impl "$FUSED,megamoe-auto" \
    --trials "$TRIALS" --seed "$SEED" --out "$W/$name/bench.json" || failures=$((failures+1))
  step "$grid on M-pairs (--cluster-m 2), the same seed"
  timed "bench $name M-pairs" -- timeout 1200 "$X" moe bench --gpus "$GPUS" --config "$grid" --impl "$FUSED" \
    --trials "$TRIALS" --seed "$SEED" --cluster-m 2 --out "$W/$name/bench-m-pairs.json" || failures=$((failures+1))
done

step "the interleaved schedule's lead D on the DeepSeek-V3-like layer (4096 tokens per rank, balanced)"
for dtype in bf16 fp8; do
  for D in 1 2 4 8 16 32 64; do
    timed "lead $D $dtype" -- timeout 120 "$X" moe bench --gpus "$GPUS" --dtype "$dtype" --impl megamoe-interleaved --lead "$D" --warmup-ms 500 \
      --filter "deepseek-v3:h7168-i2048-e256-k8/t4096/balanced" --trials "$TRIALS" --seed "$SEED" \
      --out "$W/lead/D${D}_$dtype.json" || failures=$((failures+1))
  done
done

if [ -n "${XSTAGE_STATS_BUILD:-}" ]; then
  step "per-tile traces (instrumented build): the fine-grained held-out shape and the DeepSeek-V3-like layer"
  timed "trace fine-grained" -- timeout 300 "$XSTAGE_STATS_BUILD/xstage" moe bench --gpus "$GPUS" --config configs/moe_heldout.json \
    --filter "h4096-i256-e64-k8/t6144/balanced" --impl megamoe-wave,megamoe-interleaved --trials 5 --seed "$SEED" \
    --trace "$W/trace" --out "$W/trace_fine_bench.json" || failures=$((failures+1))
  timed "trace DeepSeek-V3-like" -- timeout 300 "$XSTAGE_STATS_BUILD/xstage" moe bench --gpus "$GPUS" \
    --filter "deepseek-v3:h7168-i2048-e256-k8/t4096/balanced" --impl megamoe-wave,megamoe-interleaved --trials 5 --seed "$SEED" \
    --trace "$W/trace" --out "$W/trace_dsv3_bench.json" || failures=$((failures+1))
  python3 tools/moe/trace_figures.py "$W/trace" --out "$W/trace_figures" || failures=$((failures+1))
  xz -9 "$W"/trace/*.json
fi

pack "$W" moe_schedules
step "done: $failures failure(s)"
exit $((failures > 0))
