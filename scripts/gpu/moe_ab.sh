#!/usr/bin/env bash
# An A/B of fused-layer options (or of two builds) on a GPU machine (EP over GPUS): `xstage moe bench` once per
# variant, the variants alternated for MOE_AB_ROUNDS rounds (A B A B ...), so clock and thermal drift shows up as
# round-to-round spread instead of as a difference between variants.
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   MOE_AB_VARIANTS  ';'-separated extra bench arguments, one set per variant (default: "--cluster 1;--cluster 2")
#   MOE_AB_BINARIES  ';'-separated xstage binaries, one per variant instead (e.g. the code before and after a
#                    change: "build-old/xstage;build/xstage"); every variant then gets the same arguments
#   MOE_AB_ARGS      bench arguments every variant gets besides these (e.g. "--config configs/moe_triton_compare.json
#                    --hbm-reference")
#   MOE_AB_FILTER    bench --filter (unset: the two headline configurations; empty: the whole grid)
#   MOE_AB_IMPL      bench --impl (default: the three fused schedules and the unfused baseline)
#   MOE_AB_ROUNDS    rounds (default 2)
#   MOE_AB_SEED      the input seed of every call (default: one fresh seed for the whole run)
#   MOE_AB_CHECK=1   with MOE_AB_BINARIES: first `moe check` of every binary on that seed (all cases as configured,
#                    --impl megamoe-auto, one CTA per tile, M-pairs; a failure counts), then each binary's rel L2 per
#                    case against the first binary's: equal to the last bit on the same inputs says the outputs agree
#                    (what a change that should not move any valid row must show)
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
SEED=${MOE_AB_SEED:-$(fresh_seed)}
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
if [ -n "${MOE_AB_CHECK:-}" ]; then
  [ -n "${MOE_AB_BINARIES:-}" ] || { echo "error: MOE_AB_CHECK needs MOE_AB_BINARIES (it checks builds)" >&2; exit 2; }
  FUSED=megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved
  CHECKS=("default:" "auto:--impl megamoe-auto" "cluster1:--cluster 1 --impl $FUSED" "mpairs:--cluster-m 2 --impl $FUSED")
  for v in "${!BINARIES[@]}"; do
    for c in "${CHECKS[@]}"; do
      step "check ${c%%:*}, variant $v: ${BINARIES[$v]} ${c#*:}"
      name="$W/check-${c%%:*}-v$v"
      # shellcheck disable=SC2086  # the check's extra arguments are a list
      { timed "check" -- "${BINARIES[$v]}" moe check --gpus "$GPUS" --seed "$SEED" ${c#*:} --out "$name.json"; } > "$name.log" 2>&1
      rc=$?; tail -n 2 "$name.log"; [ $rc = 0 ] || failures=$((failures+1))
    done
  done
  step "rel L2 per case of each binary against variant 0's (same seed)"
  python3 - "$W" "${#BINARIES[@]}" <<'PY' || failures=$((failures+1))
import glob, json, os, sys
w, n = sys.argv[1], int(sys.argv[2])
rel = lambda f: {(r["case"], r["dtype"], r["impl"]): r["rel_l2_max"] for r in json.load(open(f))["results"]}
differ = 0
for f0 in sorted(glob.glob(os.path.join(w, "check-*-v0.json"))):
    a = rel(f0)
    for v in range(1, n):
        b = rel(f0.replace("-v0.json", f"-v{v}.json"))
        d = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
        differ += len(d)
        print(f"{os.path.basename(f0)[:-8]} variant {v}: {len(a.keys() & b.keys()) - len(d)} identical, {len(d)} differ")
        for k in d:
            print(f"  {'/'.join(k)}: {a[k]!r} vs {b[k]!r}")
sys.exit(1 if differ else 0)
PY
fi
for round in $(seq 1 "${MOE_AB_ROUNDS:-2}"); do
  for v in "${!VARIANTS[@]}"; do
    step "round $round, variant $v: ${BINARIES[$v]} ${VARIANTS[$v]}"
    # shellcheck disable=SC2086  # the variant and MOE_AB_ARGS are lists of arguments
    timed "bench" -- "${BINARIES[$v]}" moe bench --gpus "$GPUS" --impl "$IMPL" --filter "$FILTER" --seed "$SEED" ${VARIANTS[$v]} \
      ${MOE_AB_ARGS:-} --out "$W/ab-r$round-v$v.json" || failures=$((failures+1))
  done
done
pack "$W" moe_ab
step "done: $failures failure(s)"
exit $((failures > 0))
