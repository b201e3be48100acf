#!/usr/bin/env bash
# An A/B of fused-layer options (or of two builds) on a GPU machine (EP over GPUS): `xstage moe bench` once per
# variant, the variants alternated for MOE_AB_ROUNDS rounds (A B A B ...), so clock and thermal drift shows up as
# round-to-round spread instead of as a difference between variants.
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   MOE_AB_VARIANTS  ';'-separated extra bench arguments, one set per variant (default: "--cluster 1;--cluster 2")
#   MOE_AB_BINARIES  ';'-separated xstage binaries, one per variant instead (e.g. the code before and after a
#                    change: "build-old/xstage;build/xstage"); every variant then gets the same arguments
#   MOE_AB_FILTER    bench --filter (unset: the two headline configurations; empty: the whole grid)
#   MOE_AB_IMPL      bench --impl (default: the three fused schedules and the unfused baseline)
#   MOE_AB_ROUNDS    rounds (default 2)
#   MOE_AB_SEED      the input seed of every call (default: one fresh seed for the whole run)
# Writes $OUT/moe_ab.log and $OUT/moe_ab.tar.xz (one bench JSON per round and variant: ab-r<round>-v<variant>.json;
# tools/moe/ab_compare.py moe_ab.tar.xz --a "ab-r*-v0.json" --b "ab-r*-v1.json" compares two of them).
#
#   MOE_AB_VARIANTS="--cluster 1;--cluster 2" bash scripts/gpu/moe_ab.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to moe_ab
W="$OUT/moe_ab"; mkdir -p "$W"
FILTER=${MOE_AB_FILTER-deepseek-v3:h7168-i2048-e256-k8/t4096/balanced/bf16,h7168-i2048-e256-k8/t8192/balanced/fp8}
IMPL=${MOE_AB_IMPL:-unfused-loop,megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved}
# One seed for every bench call: the variants see identical inputs (skewed routing is drawn from the seed).
SEED=${MOE_AB_SEED:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}
echo "seed $SEED"
if [ -n "${MOE_AB_BINARIES:-}" ]; then
  IFS=';' read -r -a BINARIES <<< "$MOE_AB_BINARIES"
  VARIANTS=(); for _ in "${BINARIES[@]}"; do VARIANTS+=(""); done
else
  IFS=';' read -r -a VARIANTS <<< "${MOE_AB_VARIANTS:---cluster 1;--cluster 2}"
  BINARIES=(); for _ in "${VARIANTS[@]}"; do BINARIES+=("$X"); done
fi
require_build "${BINARIES[@]}"
failures=0
for round in $(seq 1 "${MOE_AB_ROUNDS:-2}"); do
  for v in "${!VARIANTS[@]}"; do
    step "round $round, variant $v: ${BINARIES[$v]} ${VARIANTS[$v]}"
    # shellcheck disable=SC2086  # the variant is a list of arguments
    timed "bench" -- "${BINARIES[$v]}" moe bench --gpus "$GPUS" --impl "$IMPL" --filter "$FILTER" --seed "$SEED" ${VARIANTS[$v]} \
      --out "$W/ab-r$round-v$v.json" || failures=$((failures+1))
  done
done
pack "$W" moe_ab
step "done: $failures failure(s)"
exit $((failures > 0))
