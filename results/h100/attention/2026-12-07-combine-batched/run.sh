#!/usr/bin/env bash
# main's build against the batched combine kernel: checks, both libraries in one process (outputs compared), each
# build's split modes in turn (DiT shapes, two rounds, the order alternating), the combine kernel under Nsight Compute.
#   MAIN=<main's build dir> NEW=<this build's dir> RESULTS=<dir> bash run.sh
set -u
A=${MAIN:-build-main}; N=${NEW:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $N/xstage attention check --quick \
    --seed 5 > $O/$tool.log 2>&1; log "$tool rc=$?"
done
OUT=$O/variants REPS=8 timeout 150 bash scripts/gpu/attention_variants.sh main=$A new=$N > /dev/null 2>&1; log "variants rc=$?"
SHAPES="1,4608,24,128 2,4250,24,64 1,32768,12,128 1,16384,12,64 1,8192,4,128"
for r in 1 2; do
  if [ $r = 1 ]; then order="main new"; else order="new main"; fi
  for s in $SHAPES; do
    IFS=, read Bt Mq H Dh <<< "$s"
    for b in $order; do
      [ $SECONDS -gt 420 ] && { log "time guard at r$r $s $b"; break 3; }
      if [ $b = main ]; then X=$A/xstage; else X=$N/xstage; fi
      $X attention bench --key-splits off,always --batch $Bt --seqlens $Mq --heads $H --head-dims $Dh --trials 10 \
        --out $O/dit_${b}_r${r}_${Bt}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/errors.log || log "dit $b r$r $s failed"
    done
  done
  log "round $r"
done
for b in main new; do
  if [ $b = main ]; then X=$A/xstage; else X=$N/xstage; fi
  timeout 60 ncu --clock-control none -k 'regex:key_split_combine' --launch-skip 10 --launch-count 3 \
    --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg --csv $X attention bench --key-splits always \
    --batch 2 --seqlens 4250 --heads 24 --head-dims 64 --trials 3 --warmup-ms 20 > $O/ncu_$b.csv 2> $O/ncu_$b.err; log "ncu $b rc=$?"
done
xz -9 $O/*.log $O/*.err 2>/dev/null
log done
