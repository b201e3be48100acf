#!/usr/bin/env bash
# The Ulysses attention layer by each path (docs/ATTENTION.md, "Fused Ulysses"): serial, fused_post (the
# post-attention all-to-all in the attention epilogue) and fused_both (the inputs pushed by a pusher kernel on a few SMs while
# the attention runs), on a GPU machine (ranks over GPUS, default every visible GPU; one is enough):
#   1. the plain attention check (the kernel the fused one shares);
#   2. `xstage attention ulysses check --paths fused_post,fused_both` over every visible GPU (real ranks, NCCL), and
#      with 2, 4 and 8 virtual ranks on one GPU: serial against the fp32 reference, both fused paths bit-identical to
#      serial, both store paths, fused_both's pushed bytes equal to the all-to-all's volume;
#   3. 1000 launches of each fused path back to back, the output poisoned before each (real ranks and 2 virtual ranks);
#   4. compute-sanitizer memcheck and racecheck on the small shapes, both fused paths;
#   5. the sweep (`ulysses bench`): FA-only, A2A-only, serial, fused (TMA and st.global), the whole layer by each
#      path, the audit's predictions; and what users run today, cuDNN SDPA + NCCL all-to-all
#      (tools/attention/ulysses_torch_bench.py); then the sweep with 2, 4 and 8 virtual ranks on one GPU (every
#      "remote" byte local: the layer by each path against FA-only);
#   6. the tables (Table 3 analog, the layer by path) and the figure (Fig. 11 analog) from the raw JSON
#      (tools/attention/ulysses_report.py).
# The planner's predictions for P = 2, committed before the first two-GPU run, are in
# results/h200x2/ulysses-predictions/README.md (fused_post by the planner; fused_both by head, worked out from the one-GPU runs).
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   ULYSSES_QUICK=1  the sweeps at M = 8192, 16384, 32768 and d = 128 only
#   ULYSSES_PUSH_CTAS="2 4 8"  also the 2-virtual-rank sweep at each of these pusher SM counts (--push-ctas; the
#                    default sweeps use the layer's own choice), to bench_virtual2_push<N>.json
# Writes $OUT/ulysses.log and $OUT/ulysses.tar.xz (the JSONs, sanitizer logs, table.md, fig11.png; virtual<P>/ for
# the virtual-rank sweeps).
#
#   bash scripts/gpu/ulysses.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to ulysses
W="$OUT/ulysses"; mkdir -p "$W"
require_build "$X"
SWEEP=(--seqlens 4096,8192,16384,32768,49152,65536 --heads 4,12 --head-dims 128,64 --trials 10 --replays 5)
# Virtual ranks run every rank's kernels one after another: 4 heads per rank keeps P = 8 within minutes.
VSWEEP=(--seqlens 4096,16384,32768,65536 --heads 4 --head-dims 128,64 --trials 5 --replays 3)
if [ -n "${ULYSSES_QUICK:-}" ]; then
  SWEEP=(--seqlens 8192,16384,32768 --heads 4,12 --head-dims 128)
  VSWEEP=(--seqlens 8192,16384,32768 --heads 4 --head-dims 128 --trials 5 --replays 3)
fi
PATHS=(--paths fused_post,fused_both)
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
date -u

step "the attention kernel alone (plain epilogue): xstage attention check"
timed "attention check" -- timeout 120 "$X" attention check --out "$W/attention_check.json" || failures=$((failures+1))

step "ulysses check: $GPUS real rank(s)"
timed "check real" -- timeout 300 "$X" attention ulysses check --gpus "$GPUS" "${PATHS[@]}" --out "$W/check_real.json" \
  || failures=$((failures+1))
for P in 2 4 8; do
  step "ulysses check: $P virtual ranks on one GPU"
  timed "check virtual $P" -- timeout 300 env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses check --virtual-ranks "$P" "${PATHS[@]}" \
    --out "$W/check_virtual$P.json" || failures=$((failures+1))
done

step "1000 launches of each fused path back to back, output poisoned before each"
timed "soak real" -- timeout 600 "$X" attention ulysses check --gpus "$GPUS" "${PATHS[@]}" --quick --launches 1000 \
  --out "$W/soak_real.json" || failures=$((failures+1))
timed "soak virtual 2" -- timeout 600 env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses check --virtual-ranks 2 "${PATHS[@]}" --quick \
  --launches 1000 --out "$W/soak_virtual2.json" || failures=$((failures+1))

step "compute-sanitizer memcheck and racecheck (small shapes)"
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool "$tool" --report-api-errors no --target-processes all --error-exitcode 9 \
    env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses check --virtual-ranks 2 "${PATHS[@]}" --quick --launches 1 --device-timeout-s 300 \
    > "$W/$tool-virtual2.log" 2>&1
  rc=$?; tail -n 3 "$W/$tool-virtual2.log"; [ $rc = 0 ] || { echo "$tool: FAILED (exit $rc)"; failures=$((failures+1)); }
done

step "bad input gives a clear error"
expect_status 2 "heads: must be an integer" -- "$X" attention ulysses bench --gpus "$GPUS" --heads 0 || failures=$((failures+1))
expect_status 2 "unknown store path" -- "$X" attention ulysses check --store-path dma || failures=$((failures+1))
expect_status 2 "unknown Ulysses path" -- "$X" attention ulysses check --paths fused || failures=$((failures+1))

step "xstage attention ulysses bench ${SWEEP[*]}"
timed "bench" -- timeout 400 "$X" attention ulysses bench --gpus "$GPUS" "${SWEEP[@]}" --out "$W/bench.json" || failures=$((failures+1))

step "cuDNN SDPA + NCCL all-to-all (torch), the same shapes"
if [ -f tools/attention/ulysses_torch_bench.py ]; then
  timed "torch bench" -- timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" tools/attention/ulysses_torch_bench.py "${SWEEP[@]}" \
    --out "$W/bench_torch.json" || failures=$((failures+1))
fi

for P in 2 4 8; do
  step "xstage attention ulysses bench --virtual-ranks $P ${VSWEEP[*]} (one GPU)"
  timed "bench virtual $P" -- timeout 600 env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses bench --virtual-ranks "$P" "${VSWEEP[@]}" \
    --out "$W/bench_virtual$P.json" || failures=$((failures+1))
done

for N in ${ULYSSES_PUSH_CTAS:-}; do
  step "xstage attention ulysses bench --virtual-ranks 2 --push-ctas $N ${VSWEEP[*]} (one GPU)"
  timed "bench virtual 2, push_ctas $N" -- timeout 600 env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses bench --virtual-ranks 2 \
    --push-ctas "$N" "${VSWEEP[@]}" --out "$W/bench_virtual2_push$N.json" || failures=$((failures+1))
done

step "tables and figure"
python3 tools/attention/ulysses_report.py --bench "$W/bench.json" --torch "$W/bench_torch.json" --out "$W" || failures=$((failures+1))
for P in 2 4 8; do
  [ -f "$W/bench_virtual$P.json" ] && { python3 tools/attention/ulysses_report.py --bench "$W/bench_virtual$P.json" --out "$W/virtual$P" \
    || failures=$((failures+1)); }
done

pack "$W" ulysses
step "done: $failures failure(s)"
exit $((failures > 0))
