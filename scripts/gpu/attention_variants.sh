#!/usr/bin/env bash
# A/B of builds of the attention kernel, in one process and in turn: every NAME=BUILD_DIR's libxstage_c.so is
# loaded beside the others (tools/attention_cudnn_bench.py --xstage-lib) and timed in turn with cuDNN (and
# FlashAttention-4 where importable) on the same inputs, after each build's own `xstage attention check`. Eager
# calls, not CUDA graphs (tools/attention_cudnn_bench.py says why); name one build twice (A=dir B=dir) for the
# noise floor of the comparison.
# Separate processes one after the other would compare the H200's power-capped clock as much as the kernels.
#
#   scripts/gpu/attention_variants.sh OUTDIR NAME=BUILD_DIR [NAME=BUILD_DIR ...]
#     SHAPES   'dit' (default) or 'B,M,H,d;...'        REPS   timings per backend and shape (default 15)
#     EXTRA    more backends to time beside them (default: cudnn, and fa4 if flash_attn.cute imports)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUTDIR=${1:?usage: attention_variants.sh OUTDIR NAME=BUILD_DIR ...}; shift
(($#)) || { echo "attention_variants: name at least one NAME=BUILD_DIR" >&2; exit 2; }
mkdir -p "$OUTDIR"
LOG="$OUTDIR/variants.log"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$LOG"
libs=() backends=()
for item in "$@"; do
  name=${item%%=*} dir=${item#*=}
  [ -x "$dir/xstage" ] && [ -f "$dir/libxstage_c.so" ] || { echo "attention_variants: $dir has no xstage and libxstage_c.so" | tee -a "$LOG"; exit 2; }
  timeout 120 "$dir/xstage" attention check > "$OUTDIR/check_$name.log" 2>&1
  echo "$name: xstage attention check exit $? :: $(tail -n 1 "$OUTDIR/check_$name.log")" | tee -a "$LOG"
  libs+=(--xstage-lib "$name=$dir/libxstage_c.so") backends+=("xstage:$name")
done
extra=${EXTRA:-cudnn$(python3 -c "import flash_attn.cute.interface" 2>/dev/null && echo ,fa4)}
first=${1#*=}
XSTAGE_C_LIBRARY="$first/libxstage_c.so" PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 tools/attention_cudnn_bench.py --timing eager --shapes "${SHAPES:-dit}" --reps "${REPS:-15}" "${libs[@]}" \
  --backends "$(IFS=,; echo "${backends[*]}"),$extra" --json "$OUTDIR/bench.json" 2>&1 | tee -a "$LOG"
python3 - "$OUTDIR/bench.json" <<'PY' | tee "$OUTDIR/summary.md"
import json, math, sys
doc = json.load(open(sys.argv[1]))
shapes, table = [], {}
for p in doc["points"]:
    if p["shape"] not in table:
        shapes.append(p["shape"]); table[p["shape"]] = {}
    table[p["shape"]][p["backend"]] = p.get("tflops")
backends = list(dict.fromkeys(p["backend"] for p in doc["points"]))
base = backends[0]
print("TFLOP/s, timed in turn (ratio to " + base + ")\n")
print("| shape | " + " | ".join(backends) + " |"); print("|---|" + "---:|" * len(backends))
logs = {b: [] for b in backends}
for s in shapes:
    row = []
    for b in backends:
        t, t0 = table[s].get(b), table[s].get(base)
        row.append("error" if t is None else f"{t:.0f}" + (f" ({t / t0:.3f})" if b != base and t0 else ""))
        if t is not None and t0:
            logs[b].append(math.log(t / t0))
    print(f"| {s} | " + " | ".join(row) + " |")
print("| geomean vs " + base + " | " + " | ".join(f"{math.exp(sum(v) / len(v)):.3f}" if v else "" for v in logs.values()) + " |")
PY
