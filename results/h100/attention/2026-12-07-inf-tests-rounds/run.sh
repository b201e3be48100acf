#!/usr/bin/env bash
# -inf tests flipped (XSTAGE_FUSED_KNOBS=1) against main's kernels (0): eight rounds, ABBA order
set -u
X=${XSTAGE:-build/xstage}   # the experiment build (the fused-knobs patch)
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
cp "$0" $O/run.sh
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
for r in 1 2 3 4 5 6 7 8; do
  if [ $((r % 2)) = 1 ]; then ks="0 1"; else ks="1 0"; fi
  for k in $ks; do
    [ $SECONDS -gt 240 ] && { log "time guard at r$r k$k"; break 2; }
    XSTAGE_FUSED_KNOBS=$k $X attention ulysses bench --gpus 1 --seqlens 4096,8192,16384 --heads 2,4,8 \
      --head-dims 64,128 --store-path tma,st_global --trials 5 --replays 3 --out $O/p1_k${k}_r$r.json > $O/p1_k${k}_r$r.log 2>&1; log "p1 k=$k r=$r rc=$?"
    XSTAGE_FUSED_KNOBS=$k $X attention ulysses bench --virtual-ranks 2 --seqlens 8192,16384 --heads 4,8 \
      --head-dims 64,128 --store-path tma,st_global --trials 5 --replays 3 --out $O/v2_k${k}_r$r.json > $O/v2_k${k}_r$r.log 2>&1; log "v2 k=$k r=$r rc=$?"
    for P in 4 8; do
      XSTAGE_FUSED_KNOBS=$k $X attention ulysses bench --virtual-ranks $P --seqlens 16384 --heads 4 --head-dims 64,128 \
        --store-path tma --trials 5 --replays 3 --out $O/v${P}_k${k}_r$r.json > $O/v${P}_k${k}_r$r.log 2>&1; log "v$P k=$k r=$r rc=$?"
    done
  done
done
rm -f $O/*.log
# the family-parameter build (variant 1 on both store paths): checks at 2, 4, 8 virtual ranks, soak, sanitizers
C=${FAMILY:-build-family}/xstage   # the family-parameter build
if [ -x "$C" ]; then
  timeout 60 $C attention check --out $O/fam_attention_check.json > $O/fam_attention_check.log 2>&1; log "fam attention check rc=$?"
  for P in 2 4 8; do
    timeout 90 $C attention ulysses check --virtual-ranks $P --device-timeout-s 5 --out $O/fam_check_v$P.json > $O/fam_check_v$P.log 2>&1; log "fam check P=$P rc=$?"
  done
  timeout 90 $C attention ulysses check --virtual-ranks 2 --quick --launches 1000 --device-timeout-s 5 --out $O/fam_soak.json > $O/fam_soak.log 2>&1; log "fam soak rc=$?"
  for tool in memcheck racecheck; do
    timeout 60 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $C attention ulysses check \
      --virtual-ranks 2 --quick --launches 1 --device-timeout-s 30 > $O/fam_$tool.log 2>&1; log "fam $tool rc=$?"
  done
  xz -9 $O/fam_*.log
fi
log done
