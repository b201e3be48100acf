#!/usr/bin/env bash
# The split tail with the refitted rule: the check, then eight shapes no run measured, the split off, by the rule and
# always, in one process in turn.
set -u
D=$(dirname "$0"); N=${XSTAGE_NEW:-build/xstage}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run3.tar.xz -C $O . ; }
timeout 60 $N attention check --out $O/attention_check.json > $O/attention_check.log 2>&1; log "attention check rc=$?"
for s in 1,24576,16,128 1,12288,24,64 1,49152,8,128 2,16384,10,128 1,40960,5,64 2,8192,24,64 1,20480,6,64 1,6144,32,64; do
  IFS=, read B Mq H Dh <<< "$s"
  [ $SECONDS -gt 100 ] && { log "time guard at $s"; break; }
  $N attention bench --key-splits off,auto,always --batch $B --seqlens $Mq --heads $H --head-dims $Dh --trials 10 \
    --out $O/held_${B}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/errors.log || log "$s failed"
done
xz -9 $O/*.log 2>/dev/null
log done
