#!/usr/bin/env bash
# Where the fused MoE kernel's time goes, as hardware counters, on a GPU machine: Nsight Compute on ONE GPU with
# the 2-GPU headline's per-rank load (configs/moe_profile_p1.json: 128 local experts x 256 rows, h 7168, h_inter
# 2048, bf16). One GPU because ncu replays a kernel several times to read all counters, and a replayed kernel
# that waits for a peer's stores would wait alone. Per fused schedule (and the unfused layer's cuBLAS GEMMs
# for the same expert shape): DRAM bytes and throughput, L2 hit rate and throughput, tensor-pipe activity,
# shared-memory traffic, the SM clock. Also a plain `xstage moe bench` of the same config (times and the
# kernel's own statistics at P = 1, to compare with the 2-GPU run).
# Knobs (besides XSTAGE_BUILD and OUT: scripts/gpu/env.sh):
#   MOE_PROFILE_CONFIG  the grid file (default configs/moe_profile_p1.json; e.g. configs/moe_triton_compare.json with
#                     MOE_PROFILE_ARGS="--dtype fp8 --filter t1024" for the layer that streams weights for few rows)
#   MOE_PROFILE_IMPL  fused implementations to profile (default: megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved)
#   MOE_PROFILE_ARGS  extra bench options for the fused runs (e.g. "--cluster-m 2")
#   NCU_REPLAY        ncu --replay-mode: kernel (default) or application. Neither profiles the kernels launched
#                     as cooperative clusters (CTA pairs, M-pairs): kernel replay fails with LaunchFailed, application
#                     replay with an illegal instruction (docs/MOE.md, "What bounds the bf16 tile phase"). A binary
#                     built without the cooperative launch attribute profiles them.
#   MOE_PROFILE_UNFUSED  1 (default) also profiles the unfused layer's cuBLAS GEMMs; 0 skips it
#   NCU_SECTIONS      ncu sections (default: SpeedOfLight MemoryWorkloadAnalysis ComputeWorkloadAnalysis Occupancy
#                     WarpStateStats); empty: the raw counters of the metrics list only
#   MOE_PROFILE_KEEP_REPORTS  1: also keep the Nsight Compute reports (<impl>.ncu-rep, up to 17 MB each) in the
#                     archive; default 0: their details pages as text only (results/README.md: no reports in the tree)
# Writes $OUT/moe_profile.log and $OUT/moe_profile.tar.xz (bench.json, each profiled kernel's `ncu --page details`
# as <impl>.txt, the profiled bench's <impl>.stdout; <impl>.ncu-rep only with MOE_PROFILE_KEEP_REPORTS=1).
#
#   bash scripts/gpu/moe_profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to moe_profile
W="$OUT/moe_profile"; mkdir -p "$W"
require_build "$X"
CONFIG=${MOE_PROFILE_CONFIG:-configs/moe_profile_p1.json}
IMPLS=${MOE_PROFILE_IMPL:-megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved}
read -r -a ARGS <<< "${MOE_PROFILE_ARGS:-}"
read -r -a SECTIONS <<< "${NCU_SECTIONS-SpeedOfLight MemoryWorkloadAnalysis ComputeWorkloadAnalysis Occupancy WarpStateStats}"
NCU=(ncu --replay-mode "${NCU_REPLAY:-kernel}" --clock-control none --target-processes all)
for s in "${SECTIONS[@]}"; do NCU+=(--section "$s"); done
NCU+=(--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__m_xbar2l1tex_read_bytes.sum)
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
ncu --version | tail -1

step "bench at P = 1 (times, kernel statistics)"
timed "bench" -- "$X" moe bench --gpus 1 --config "$CONFIG" --impl "unfused-loop,$IMPLS" "${ARGS[@]}" \
  --out "$W/bench.json" || failures=$((failures+1))

IFS=',' read -r -a IMPL_LIST <<< "$IMPLS"
for impl in "${IMPL_LIST[@]}"; do
  step "ncu: $impl (the 3rd launch: after the untimed first run and one warm-up call)"
  timed "ncu $impl" -- "${NCU[@]}" -k regex:megamoe_kernel --launch-skip 2 --launch-count 1 -o "$W/$impl" -f \
    "$X" moe bench --gpus 1 --config "$CONFIG" --impl "$impl" "${ARGS[@]}" --trials 2 --warmup-ms 1 > "$W/$impl.stdout" 2>&1 \
    || failures=$((failures+1))
  ncu --import "$W/$impl.ncu-rep" --page details > "$W/$impl.txt" 2>&1
  grep -E "Duration|SM Frequency|DRAM Throughput|dram__|L2 Hit Rate|lts__|hmma|Memory Throughput|L2 Cache Throughput|xbar2l1tex|gpu__time|cycles_elapsed" "$W/$impl.txt" | head -24
done

[ "${MOE_PROFILE_UNFUSED:-1}" = 1 ] && {
step "ncu: the unfused layer's first cuBLAS GEMMs (Linear-1 and Linear-2 of one expert, M = 256 rows)"
timed "ncu unfused" -- "${NCU[@]}" -k regex:'nvjet|gemm|xmma|cutlass' --launch-skip 0 --launch-count 4 -o "$W/unfused-loop" -f \
  "$X" moe bench --gpus 1 --config "$CONFIG" --impl unfused-loop --trials 1 --warmup-ms 1 > "$W/unfused-loop.stdout" 2>&1 \
  || failures=$((failures+1))
ncu --import "$W/unfused-loop.ncu-rep" --page details > "$W/unfused-loop.txt" 2>&1
grep -E "^  [a-z_0-9]+.*\(|Duration|SM Frequency|DRAM Throughput|L2 Hit Rate|hmma" "$W/unfused-loop.txt" | head -40
}

if [ "${MOE_PROFILE_KEEP_REPORTS:-0}" = 1 ]; then
  echo "keeping the .ncu-rep reports in moe_profile.tar.xz (MOE_PROFILE_KEEP_REPORTS=1)"
else
  rm -f "$W/"*.ncu-rep   # their details pages are in <impl>.txt
fi
pack "$W" moe_profile
step "done: $failures failure(s)"
exit $((failures > 0))
