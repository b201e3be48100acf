#!/usr/bin/env bash
# xstage and FlashAttention-4 at one query shape against several key lengths, in turn, two rounds; then fit.py splits
# each one's time into a part per key and a part per launch. FlashAttention-4 must import (flash_attn.cute).
# XSTAGE_BUILD: the build (default build/); RESULTS: where the files go (default out/).
#
#   bash results/h100/attention/2026-12-07-key-length-fit/run.sh
set -u
cd "$(dirname "$0")/../../../.." || exit 1
source scripts/gpu/env.sh
R=${RESULTS:-out}; mkdir -p "$R"
require_build "$XSTAGE_C_LIBRARY"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > "$R/gpu.txt" 2>&1
F=results/h100/attention/2026-12-07-key-length-fit
S="1,16384,12,64,16384;1,16384,12,64,12288;1,16384,12,64,8192;1,16384,12,64,4096"
S="$S;1,16896,24,128,16896;1,16896,24,128,12672;1,16896,24,128,8448;1,16896,24,128,4224"
for r in 1 2; do
  timeout 200 python3 tools/attention/cudnn_bench.py --shapes "$S" --backends xstage,fa4 --reps 16 \
    --json "$R/r$r.json" --markdown "$R/r$r.md" > "$R/r$r.log" 2>&1
  echo "round $r rc=$?"
done
python3 "$F/fit.py" "$R/r1.json" "$R/r2.json" > "$R/fit.md"; echo "fit rc=$?"
cat "$R/fit.md"
