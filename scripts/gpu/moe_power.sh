#!/usr/bin/env bash
# Power and SM clock while each MoE implementation runs, on a GPU machine (EP over GPUS): `xstage moe bench` of one
# configuration, one implementation (and option set) per call, many trials, with nvidia-smi sampling every GPU
# every 20 ms in the background. Answers "does the fused kernel run into the power limit, and at what clock" with
# the driver's own readings instead of the clock the kernel statistics infer; tools/moe/power_summary.py prints
# the table.
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   MOE_POWER_FILTER    bench --filter (default: the bf16 DeepSeek-V3-like headline, 4096 tokens per rank)
#   MOE_POWER_VARIANTS  ';'-separated "impl [bench options]" (default: unfused-loop; megamoe-wave;
#                       megamoe-wave --cluster-m 2; megamoe-interleaved)
#   MOE_POWER_TRIALS    timed trials per call (default 400: several seconds of steady load)
# Writes $OUT/moe_power.log and $OUT/moe_power.tar.xz (per variant i: v<i>.variant, the bench's v<i>.json and
# nvidia-smi's v<i>.csv).
#
#   bash scripts/gpu/moe_power.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to moe_power
W="$OUT/moe_power"; mkdir -p "$W"
require_build "$X"
FILTER=${MOE_POWER_FILTER-deepseek-v3:h7168-i2048-e256-k8/t4096/balanced/bf16}
TRIALS=${MOE_POWER_TRIALS:-400}
SEED=$(fresh_seed)
IFS=';' read -r -a VARIANTS <<< "${MOE_POWER_VARIANTS:-unfused-loop;megamoe-wave;megamoe-wave --cluster-m 2;megamoe-interleaved}"
QUERY=timestamp,index,power.draw,power.limit,clocks.sm,clocks.mem,temperature.gpu,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown
step "machine (seed $SEED)"
nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks.max.sm --format=csv
failures=0
for v in "${!VARIANTS[@]}"; do
  read -r -a args <<< "${VARIANTS[$v]}"
  step "variant $v: ${VARIANTS[$v]}"
  nvidia-smi --query-gpu="$QUERY" --format=csv,nounits -lms 20 > "$W/v$v.csv" 2>&1 &
  smi=$!
  timed "bench" -- "$X" moe bench --gpus "$GPUS" --filter "$FILTER" --seed "$SEED" --trials "$TRIALS" --impl "${args[@]}" \
    --out "$W/v$v.json" || failures=$((failures+1))
  kill "$smi"; wait "$smi" 2>/dev/null
  echo "${VARIANTS[$v]}" > "$W/v$v.variant"
done
python3 tools/moe/power_summary.py "$W" || failures=$((failures+1))
pack "$W" moe_power
step "done: $failures failure(s)"
exit $((failures > 0))
