#!/usr/bin/env bash
# fused_both taken apart: the layer, the layer without its copy-out, the copy-out alone and the start of the call with
# every rank's head start alone, beside FA-only, serial and fused_post, with 2, 4 and 8 virtual ranks on one GPU (TMA
# store path), two rounds at each P.
#   XSTAGE_BUILD=build RESULTS=<dir> bash results/h100/attention/2026-12-07-fused-both-parts/run.sh   (from the repository root)
set -u
source scripts/gpu/env.sh
O=$(mktemp -d); R=${RESULTS:-.}; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit,driver_version --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
B=(--store-path tma --trials 5 --replays 3)
for r in 1 2; do
  for P in 2 4 8; do
    [ $SECONDS -gt 420 ] && { log "time guard at virtual $P round $r"; break 2; }
    M=16384; [ $P = 2 ] && M=16384,32768
    timeout 150 $X attention ulysses bench --virtual-ranks $P --seqlens $M --heads 4,12 --head-dims 128,64 "${B[@]}" \
      --out $O/v${P}_r$r.json > $O/v${P}_r$r.log 2>&1; log "virtual $P round $r rc=$?"
  done
done
for f in $O/v*.json; do
  python3 tools/attention/ulysses_report.py --bench $f --out $O/report_$(basename $f .json) > /dev/null 2>&1 || log "report $f failed"
done
xz -9 $O/*.log 2>/dev/null; log done
