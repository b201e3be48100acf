#!/usr/bin/env bash
# main as it is, call 2 of 3: fused_both (both all-to-alls hidden) against FA-only, serial and fused_post with 2, 4 and
# 8 virtual ranks on one GPU (every "remote" byte local), TMA store path, two rounds at P = 2.
#   XSTAGE_BUILD=build RESULTS=<dir> bash results/h100/attention/2026-12-07-main-state/call2.sh   (from the repository root)
set -u
source scripts/gpu/env.sh
O=$(mktemp -d); R=${RESULTS:-.}; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit,driver_version --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/call2.tar.xz -C $O . ; }
B=(--store-path tma --trials 5 --replays 3)
for r in 1 2; do
  [ $SECONDS -gt 250 ] && { log "time guard at virtual 2 round $r"; break; }
  timeout 150 $X attention ulysses bench --virtual-ranks 2 --seqlens 8192,16384,32768 --heads 4,12 --head-dims 128,64 "${B[@]}" \
    --out $O/v2_r$r.json > $O/v2_r$r.log 2>&1; log "virtual 2 round $r rc=$?"
done
for P in 4 8; do
  [ $SECONDS -gt 420 ] && { log "time guard at virtual $P"; break; }
  timeout 150 $X attention ulysses bench --virtual-ranks $P --seqlens 16384 --heads 4,12 --head-dims 128,64 "${B[@]}" \
    --out $O/v$P.json > $O/v$P.log 2>&1; log "virtual $P rc=$?"
done
for f in $O/v*.json; do
  python3 tools/attention/ulysses_report.py --bench $f --out $O/report_$(basename $f .json) > /dev/null 2>&1 || log "report $f failed"
done
xz -9 $O/*.log 2>/dev/null; log done
