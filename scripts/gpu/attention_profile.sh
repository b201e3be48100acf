#!/usr/bin/env bash
# Where the attention kernel's time goes, as hardware counters beside what users run, on a GPU machine (one GPU:
# GPU 0): Nsight Compute on one launch of xstage's forward, cuDNN SDPA's and FlashAttention-4's (where
# flash_attn.cute imports) per shape, after tools/attention/cudnn_bench.py's warm-up with that backend alone. Per
# kernel: duration, SM clock, tensor-pipe activity, issue-slot use, warp stall reasons per issued instruction,
# shared-memory bank conflicts, registers and shared memory per CTA (ncu's details page, as text).
# Knobs: XSTAGE_BUILD and OUT (scripts/gpu/env.sh); SHAPES ('B,M,H,d;...', default Flux-2048 and [1, 8192, 4, 64],
#   where cuDNN leads); BACKENDS (default xstage,cudnn and fa4 where it imports).
# Writes $OUT/attention_profile.log and $OUT/attention_profile.tar.xz (<backend>_<shape>.txt; no ncu reports).
#
#   bash scripts/gpu/attention_profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to attention_profile
W="$OUT/attention_profile"; mkdir -p "$W"
require_build "$XSTAGE_C_LIBRARY"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
SHAPES=${SHAPES:-1,16896,24,128;1,8192,4,64}
BACKENDS=${BACKENDS:-xstage,cudnn$(python3 -c "import flash_attn.cute.interface" 2>/dev/null && echo ,fa4)}
declare -A KERNEL=([xstage]='regex:flash_fwd_sm90' [cudnn]='regex:sdpa|fmha|flash|attn' [fa4]='regex:kernel|flash|Flash')
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
ncu --version | tail -n 1

IFS=';' read -r -a shapes <<< "$SHAPES"
for shape in "${shapes[@]}"; do
  for b in ${BACKENDS//,/ }; do
    name="${b}_${shape//,/x}"
    step "$name"
    timeout 300 ncu --clock-control none --target-processes all -k "${KERNEL[$b]}" --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section LaunchStats \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum \
      python3 tools/attention/cudnn_bench.py --shapes "$shape" --backends "$b" --reps 2 --warmup-ms 50 > "$W/$name.txt" 2>&1
    rc=$?; [ $rc = 0 ] || failures=$((failures+1))
    echo "exit $rc: $(grep -E 'Duration|SM Frequency|hmma_cycles_active|Issue Slots Busy' "$W/$name.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-300)"
  done
done
pack "$W" attention_profile
echo "done: $failures failure(s)"
exit $((failures > 0))
