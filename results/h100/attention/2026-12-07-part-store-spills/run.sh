#!/usr/bin/env bash
# main against the spill-free part store: each build's check, then --key-splits off,always per build in one process,
# in turn, two rounds in alternating order.    MAIN=<main's build> NEW=<this build> RESULTS=<dir> bash run.sh
set -u
A=${MAIN:-build-main}; N=${NEW:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
for b in main new; do
  if [ $b = main ]; then X=$A/xstage; else X=$N/xstage; fi
  timeout 60 $X attention check --seed 13 --out $O/check_$b.json > $O/check_$b.log 2>&1; log "check $b rc=$?"
done
for r in 1 2; do
  if [ $r = 1 ]; then order="main new"; else order="new main"; fi
  for s in 2,4250,24,64 1,16384,12,64 1,4608,24,128; do
    IFS=, read Bt Mq H Dh <<< "$s"
    for b in $order; do
      if [ $b = main ]; then X=$A/xstage; else X=$N/xstage; fi
      $X attention bench --key-splits off,always --batch $Bt --seqlens $Mq --heads $H --head-dims $Dh --trials 10 \
        --out $O/dit_${b}_r${r}_${Bt}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/errors.log || log "dit $b r$r $s failed"
    done
  done
  log "round $r"
done
xz -9 $O/*.log 2>/dev/null
log done
