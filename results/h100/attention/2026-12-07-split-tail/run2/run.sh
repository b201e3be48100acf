#!/usr/bin/env bash
# The split tail, second build (the combine kernel with one item a thread): check and memcheck; each kernel's time
# under Nsight Compute at four shapes (auto and off); the DiT shapes and the grid timed in turn (off, auto).
set -u
D=$(dirname "$0"); N=${XSTAGE_NEW:-build/xstage}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run2.tar.xz -C $O . ; }
timeout 150 $N attention check --out $O/attention_check.json > $O/attention_check.log 2>&1; log "attention check rc=$?"
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $N attention check --quick --seed 5 \
  > $O/memcheck.log 2>&1; log "memcheck rc=$?"
for s in 1,4608,24,128 2,4250,24,64 1,32768,12,128 1,32768,4,64; do
  IFS=, read B Mq H Dh <<< "$s"
  for k in auto off; do
    [ $SECONDS -gt 110 ] && { log "time guard at ncu $s $k"; break 2; }
    timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 3 --launch-count 6 \
      $N attention bench --key-splits $k --batch $B --seqlens $Mq --heads $H --head-dims $Dh --trials 1 --warmup-ms 0 \
      > $O/ncu_${k}_${B}x${Mq}x${H}x${Dh}.txt 2>&1; log "ncu $s $k rc=$?"
  done
done
SHAPES="1,4608,24,128 1,16896,24,128 2,4250,24,64 1,32760,40,128 1,75600,24,128 1,32768,12,128 1,16384,12,64 1,8192,4,128 1,8192,4,64"
for s in $SHAPES; do
  IFS=, read B Mq H Dh <<< "$s"
  [ $SECONDS -gt 190 ] && { log "time guard at dit $s"; break; }
  $N attention bench --key-splits off,auto --batch $B --seqlens $Mq --heads $H --head-dims $Dh --trials 12 \
    --out $O/dit_new_r3_${B}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/dit_errors.log || log "dit $s failed"
done
log "dit"
[ $SECONDS -lt 215 ] && { timeout 45 $N attention bench --key-splits off,auto --heads 4,12 --head-dims 128,64 --seqlens 8192,16384,32768 \
  --trials 8 --out $O/grid.json > $O/grid.log 2>&1; log "grid rc=$?"; }
xz -9 $O/*.log 2>/dev/null
log done
