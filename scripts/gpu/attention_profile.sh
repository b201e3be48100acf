#!/usr/bin/env bash
# Where the attention kernel's time goes, as hardware counters beside what users run: Nsight Compute on one kernel
# launch of xstage's forward, cuDNN SDPA's and FlashAttention-4's (where flash_attn.cute imports) per shape, after
# the benchmark's warm-up (tools/attention_cudnn_bench.py with one backend at a time; the profiled launch is one
# from the middle of its timed replays). Per kernel: duration, SM clock, tensor-pipe activity, issue-slot use,
# warp stall reasons, shared-memory bank conflicts, registers and shared memory per CTA.
#
#   scripts/gpu/attention_profile.sh OUTDIR [BUILD_DIR]        (BUILD_DIR default build: its libxstage_c.so)
#     SHAPES    'B,M,H,d;...' (default: Flux-2048 and the d = 64 shape where cuDNN leads)
#     BACKENDS  default: xstage,cudnn and fa4 where it imports
# Writes OUTDIR/<backend>_<shape>.txt (ncu's details page) and OUTDIR/profile.log; no ncu reports (results/ keeps
# text only).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUTDIR=${1:?usage: attention_profile.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-build}
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/profile.log") 2>&1
SHAPES=${SHAPES:-1,16896,24,128;1,8192,4,64}
BACKENDS=${BACKENDS:-xstage,cudnn$(python3 -c "import flash_attn.cute.interface" 2>/dev/null && echo ,fa4)}
declare -A KERNEL=([xstage]='regex:flash_fwd_sm90' [cudnn]='regex:sdpa|fmha|flash|attn' [fa4]='regex:kernel|flash|Flash')
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
ncu --version | tail -n 1
IFS=';' read -r -a shapes <<< "$SHAPES"
for shape in "${shapes[@]}"; do
  for b in ${BACKENDS//,/ }; do
    name="${b}_${shape//,/x}"
    echo "=== $name ==="
    XSTAGE_C_LIBRARY="$BUILD/libxstage_c.so" PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}" \
      timeout 300 ncu --clock-control none --target-processes all -k "${KERNEL[$b]}" --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section MemoryWorkloadAnalysis_Tables \
      --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum \
      python3 tools/attention_cudnn_bench.py --shapes "$shape" --backends "$b" --reps 2 --warmup-ms 50 \
      > "$OUTDIR/$name.txt" 2>&1
    echo "exit $?: $(grep -E 'Duration|SM Frequency|Tensor|Issue Slots Busy' "$OUTDIR/$name.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-400)"
  done
done
