#!/usr/bin/env bash
# A/B experiment on the GPU machine: several builds of `xstage` (binaries .carry-attn/xstage_<NAME>,
# each with a different kernel configuration) run the full correctness check, then the d=64 (and
# optionally d=128) bench in interleaved rounds, with cuDNN re-measured alongside; prints a table of
# median TFLOP/s per variant and point. Everything goes to $OUT/variants.log and $OUT/variants.tgz.
#
#   OUT=/tmp/out scripts/gpu/attention_variants.sh "A B C" [head_dims] [rounds]
set -uo pipefail
cd "$(dirname "$0")/../.."
VARIANTS=${1:-A}
HEAD_DIMS=${2:-64}
ROUNDS=${3:-2}
OUT=${OUT:-/tmp/xstage-attention-variants}
W="$OUT/work"
mkdir -p "$W"
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
LOG="$OUT/variants.log"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm --format=csv | tee "$LOG"
for v in $VARIANTS; do
  timeout 60 ".carry-attn/xstage_$v" attention check > "$W/check_$v.log" 2>&1
  echo "variant $v check rc=$? :: $(tail -1 "$W/check_$v.log")" | tee -a "$LOG"
done
for r in $(seq 1 "$ROUNDS"); do
  for v in $VARIANTS; do
    timeout 90 ".carry-attn/xstage_$v" attention bench --head-dims "$HEAD_DIMS" --trials 15 --out "$W/bench_${v}_$r.json" >> "$W/bench.log" 2>&1
    echo "round $r variant $v rc=$?" | tee -a "$LOG"
  done
  timeout 90 python3 tools/attention_cudnn_bench.py --head-dims "$HEAD_DIMS" --backends cudnn --reps 15 \
    --json "$W/bench_cudnn_$r.json" >> "$W/bench.log" 2>&1
  echo "round $r cudnn rc=$?" | tee -a "$LOG"
done
python3 - "$W" "$VARIANTS" "$ROUNDS" <<'PY' | tee -a "$LOG"
import json, statistics, sys, os
w, variants, rounds = sys.argv[1], sys.argv[2].split() + ["cudnn"], int(sys.argv[3])
table = {}
for v in variants:
    for r in range(1, rounds + 1):
        path = os.path.join(w, f"bench_{v}_{r}.json")
        if not os.path.exists(path):
            continue
        for p in json.load(open(path))["points"]:
            if "tflops" in p:
                table.setdefault((p["head_dim"], p["heads"], p["seqlen"]), {}).setdefault(v, []).append(p["tflops"])
print("d heads M | " + " | ".join(f"{v:>14}" for v in variants) + "   (median over rounds, [min-max])")
for key in sorted(table):
    row = []
    for v in variants:
        xs = table[key].get(v, [])
        row.append(f"{statistics.median(xs):6.1f} [{min(xs):.0f}-{max(xs):.0f}]" if xs else " " * 14)
    print(f"{key[0]} {key[1]} {key[2]} | " + " | ".join(row))
PY
tar czf "$OUT/variants.tgz" -C "$OUT" work && rm -rf "$W"
