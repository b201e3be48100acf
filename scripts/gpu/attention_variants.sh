#!/usr/bin/env bash
# An A/B of attention kernel configurations on a GPU machine (one GPU: GPU 0): several builds of `xstage`, each
# from its own build directory (e.g. build-A/, build-B/: the same source with a different tile configuration),
#   1. each runs the full `xstage attention check`;
#   2. then, for ROUNDS rounds, each runs `xstage attention bench` at the given head dims, with cuDNN SDPA
#      re-measured in every round (tools/attention/cudnn_bench.py);
#   3. a table of the median TFLOP/s per build and point over the rounds, [min-max].
# Arguments (the builds are given here instead of XSTAGE_BUILD; OUT: scripts/gpu/env.sh):
#   BUILDS     space-separated build directories, one per variant, named by their folder (default: build)
#   HEAD_DIMS  comma-separated head dims (default 64)
#   ROUNDS     rounds of benches (default 2)
# Writes $OUT/attention_variants.log and $OUT/attention_variants.tar.xz (every check log and bench JSON).
#
#   bash scripts/gpu/attention_variants.sh "build-A build-B" [HEAD_DIMS] [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to attention_variants
W="$OUT/attention_variants"; mkdir -p "$W"
read -r -a BUILDS <<< "${1:-build}"
HEAD_DIMS=${2:-64}
ROUNDS=${3:-2}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
for b in "${BUILDS[@]}"; do require_build "$b/xstage"; done
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm --format=csv
for b in "${BUILDS[@]}"; do
  v=$(basename "$b")
  timeout 60 "$b/xstage" attention check > "$W/check_$v.log" 2>&1
  rc=$?; [ $rc = 0 ] || failures=$((failures+1))
  echo "variant $v check rc=$rc :: $(tail -1 "$W/check_$v.log")"
done
for r in $(seq 1 "$ROUNDS"); do
  for b in "${BUILDS[@]}"; do
    v=$(basename "$b")
    timeout 90 "$b/xstage" attention bench --head-dims "$HEAD_DIMS" --reps 15 --json "$W/bench_${v}_$r.json" >> "$W/bench.log" 2>&1
    rc=$?; [ $rc = 0 ] || failures=$((failures+1))
    echo "round $r variant $v rc=$rc"
  done
  timeout 90 python3 tools/attention/cudnn_bench.py --head-dims "$HEAD_DIMS" --backends cudnn --reps 15 \
    --json "$W/bench_cudnn_$r.json" >> "$W/bench.log" 2>&1
  rc=$?; [ $rc = 0 ] || failures=$((failures+1))
  echo "round $r cudnn rc=$rc"
done
python3 - "$W" "$ROUNDS" "${BUILDS[@]}" <<'PY'
import json, os, statistics, sys
w, rounds = sys.argv[1], int(sys.argv[2])
variants = [os.path.basename(b) for b in sys.argv[3:]] + ["cudnn"]
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
pack "$W" attention_variants
step "done: $failures failure(s)"
exit $((failures > 0))
