#!/usr/bin/env bash
# The split tail: checks and sanitizers of the new build, the Ulysses paths still bit-identical, then the DiT shapes
# timed in turn (new with the split off and on, in one process) beside main's build (separate processes, the order
# alternating per round), the synthetic grid, and the torch path under CUDA graphs beside cuDNN.
set -u
D=$(dirname "$0"); N=${XSTAGE_NEW:-build/xstage}; M=${XSTAGE_MAIN:-build-main/xstage}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
timeout 150 $N attention check --out $O/attention_check.json > $O/attention_check.log 2>&1; log "attention check rc=$?"
timeout 100 $N attention ulysses check --virtual-ranks 2 --device-timeout-s 5 --out $O/ulysses_check_v2.json > $O/ulysses_check_v2.log 2>&1; log "ulysses check P=2 rc=$?"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $N attention check --quick --seed 3 \
    > $O/$tool.log 2>&1; log "$tool rc=$?"
done
SHAPES="1,4608,24,128 1,16896,24,128 2,4250,24,64 1,32760,40,128 1,75600,24,128 1,32768,12,128 1,16384,12,64 1,8192,4,128 1,8192,4,64"
for r in 1 2; do
  if [ $r = 1 ]; then order="new main"; else order="main new"; fi
  for s in $SHAPES; do
    IFS=, read B Mq H Dh <<< "$s"
    for b in $order; do
      [ $SECONDS -gt 330 ] && { log "time guard at dit r$r $s $b"; break 3; }
      if [ $b = new ]; then X="$N attention bench --key-splits off,auto"; else X="$M attention bench"; fi
      $X --batch $B --seqlens $Mq --heads $H --head-dims $Dh --trials 10 --out $O/dit_${b}_r${r}_${B}x${Mq}x${H}x${Dh}.json \
        > /dev/null 2>> $O/dit_errors.log || log "dit $b r$r $s failed"
    done
  done
  log "dit round $r"
done
[ $SECONDS -lt 380 ] && { timeout 70 $N attention bench --key-splits off,auto --heads 4,12 --head-dims 128,64 --seqlens 8192,16384,32768 \
  --trials 8 --out $O/grid.json > $O/grid.log 2>&1; log "grid rc=$?"; }
[ $SECONDS -lt 450 ] && { PYTHONPATH=python XSTAGE_C_LIBRARY=build/libxstage_c.so timeout 70 python3 tools/attention/cudnn_bench.py --shapes dit \
  --reps 5 --backends xstage,cudnn --json $O/torch_dit.json > $O/torch_dit.log 2>&1; log "torch dit rc=$?"; }
xz -9 $O/*.log 2>/dev/null
log done
