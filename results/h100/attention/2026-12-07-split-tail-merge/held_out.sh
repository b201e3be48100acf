#!/usr/bin/env bash
# The launcher's rule on eight shapes no fit used, main's build: `xstage attention bench --key-splits off,auto,always`
# (one process, in turn), two rounds.
#   MAIN=<main's build dir> RESULTS=<dir> bash held_out.sh
set -u
A=${MAIN:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/held_out.tar.xz -C $O . ; }
for r in 1 2; do
  for s in 1,24576,16,128 1,12288,24,64 1,49152,8,128 2,16384,10,128 1,40960,5,64 2,8192,24,64 1,20480,6,64 1,6144,32,64; do
    IFS=, read Bt Mq H Dh <<< "$s"
    [ $SECONDS -gt 200 ] && { log "time guard at r$r $s"; break 2; }
    $A/xstage attention bench --key-splits off,auto,always --batch $Bt --seqlens $Mq --heads $H --head-dims $Dh --trials 10 \
      --out $O/held_main_r${r}_${Bt}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/errors.log || log "r$r $s failed"
  done
  log "round $r"
done
log done
