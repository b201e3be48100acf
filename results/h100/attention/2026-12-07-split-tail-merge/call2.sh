#!/usr/bin/env bash
# The split's cost per build: each build's `xstage attention bench --key-splits off,auto,always` (one process, in turn)
# on the DiT shapes (first main's `xstage attention check`, as in call1.sh), two rounds with the builds' order alternating, then the synthetic grid (off, always) per build.
#   MAIN=<main's build dir> MERGE=<the merge build's dir> RESULTS=<dir> bash call2.sh
set -u
A=${MAIN:-build-main}; B=${MERGE:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/call2.tar.xz -C $O . ; }
timeout 60 $A/xstage attention check --seed 11 --out $O/check_main.json > $O/check_main.log 2>&1; log "attention check main rc=$?"
SHAPES="1,4608,24,128 1,16896,24,128 2,4250,24,64 1,32760,40,128 1,75600,24,128 1,32768,12,128 1,16384,12,64 1,8192,4,128 1,8192,4,64"
for r in 1 2; do
  if [ $r = 1 ]; then order="main merge"; else order="merge main"; fi
  for s in $SHAPES; do
    IFS=, read Bt Mq H Dh <<< "$s"
    for b in $order; do
      [ $SECONDS -gt 380 ] && { log "time guard at dit r$r $s $b"; break 3; }
      if [ $b = main ]; then X=$A/xstage; else X=$B/xstage; fi
      $X attention bench --key-splits off,auto,always --batch $Bt --seqlens $Mq --heads $H --head-dims $Dh --trials 10 \
        --out $O/dit_${b}_r${r}_${Bt}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/errors.log || log "dit $b r$r $s failed"
    done
  done
  log "dit round $r"
done
for b in main merge; do
  [ $SECONDS -gt 480 ] && { log "time guard at grid $b"; break; }
  if [ $b = main ]; then X=$A/xstage; else X=$B/xstage; fi
  timeout 100 $X attention bench --key-splits off,always --heads 4,12 --head-dims 128,64 --seqlens 8192,16384,32768 \
    --trials 8 --out $O/grid_$b.json > $O/grid_$b.log 2>&1; log "grid $b rc=$?"
done
xz -9 $O/*.log 2>/dev/null
log done
