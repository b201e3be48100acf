#!/usr/bin/env bash
# Nsight Compute on the forward kernel (split off and always) and the combine kernel: per-SM active cycles.
#   XSTAGE_BUILD=<build dir> RESULTS=<dir> bash run.sh
set -u
B=${XSTAGE_BUILD:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
M=gpu__time_duration.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,smsp__inst_executed.sum,launch__grid_size
for s in 2,4250,24,64 1,16384,12,64 1,4608,24,128; do
  IFS=, read Bt Mq H Dh <<< "$s"
  for mode in off always; do
    timeout 120 ncu --clock-control none -k 'regex:flash_fwd_sm90|key_split_combine' --launch-skip 30 --launch-count 4 \
      --metrics $M --csv $B/xstage attention bench --key-splits $mode --batch $Bt --seqlens $Mq --heads $H --head-dims $Dh \
      --trials 3 --warmup-ms 20 > $O/ncu_${mode}_${Bt}x${Mq}x${H}x${Dh}.csv 2> $O/ncu_${mode}_${Bt}x${Mq}x${H}x${Dh}.err
    log "$s $mode rc=$?"
  done
done
xz -9 $O/*.err 2>/dev/null
log done
