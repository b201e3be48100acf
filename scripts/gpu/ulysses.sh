#!/usr/bin/env bash
# The Ulysses attention layer with its all-to-all serial or fused into the attention epilogue (docs/ATTENTION.md,
# "Fused Ulysses"), on a GPU machine (ranks over GPUS, default every visible GPU; one is enough):
#   1. the plain attention check (the kernel the fused one shares);
#   2. `xstage attention ulysses check` over every visible GPU (real ranks, NCCL), and with 2, 4 and 8 virtual
#      ranks on one GPU: serial against the fp32 reference, fused bit-identical to serial, both store paths;
#   3. 1000 fused launches back to back, the output poisoned before each (real ranks and 2 virtual ranks);
#   4. compute-sanitizer memcheck and racecheck on the small shapes;
#   5. the sweep (`ulysses bench`): FA-only, A2A-only, serial, fused (TMA and st.global), the whole layer, the
#      audit's predictions; and what users run today, cuDNN SDPA + NCCL all-to-all (tools/attention/ulysses_torch_bench.py);
#   6. the table (Table 3 analog) and the figure (Fig. 11 analog) from the raw JSON (tools/attention/ulysses_report.py).
# Knobs (besides XSTAGE_BUILD, OUT and GPUS: scripts/gpu/env.sh):
#   ULYSSES_QUICK=1  the sweep at M = 8192, 16384, 32768 and d = 128 only
# Writes $OUT/ulysses.log and $OUT/ulysses.tar.xz (the JSONs, sanitizer logs, table.md, fig11.png).
#
#   bash scripts/gpu/ulysses.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to ulysses
W="$OUT/ulysses"; mkdir -p "$W"
require_build "$X"
SWEEP=(--seqlens 4096,8192,16384,32768,49152,65536 --heads 4,12 --head-dims 128,64 --trials 10 --replays 5)
[ -n "${ULYSSES_QUICK:-}" ] && SWEEP=(--seqlens 8192,16384,32768 --heads 4,12 --head-dims 128)
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
date -u

step "the attention kernel alone (plain epilogue): xstage attention check"
timed "attention check" -- timeout 120 "$X" attention check --out "$W/attention_check.json" || failures=$((failures+1))

step "ulysses check: $GPUS real rank(s)"
timed "check real" -- timeout 300 "$X" attention ulysses check --gpus "$GPUS" --out "$W/check_real.json" || failures=$((failures+1))
for P in 2 4 8; do
  step "ulysses check: $P virtual ranks on one GPU"
  timed "check virtual $P" -- timeout 300 env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses check --virtual-ranks "$P" \
    --out "$W/check_virtual$P.json" || failures=$((failures+1))
done

step "1000 fused launches back to back, output poisoned before each"
timed "soak real" -- timeout 300 "$X" attention ulysses check --gpus "$GPUS" --quick --launches 1000 --out "$W/soak_real.json" \
  || failures=$((failures+1))
timed "soak virtual 2" -- timeout 300 env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses check --virtual-ranks 2 --quick --launches 1000 \
  --out "$W/soak_virtual2.json" || failures=$((failures+1))

step "compute-sanitizer memcheck and racecheck (small shapes)"
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool "$tool" --report-api-errors no --target-processes all --error-exitcode 9 \
    env CUDA_VISIBLE_DEVICES=0 "$X" attention ulysses check --virtual-ranks 2 --quick --launches 1 --device-timeout-s 300 \
    > "$W/$tool-virtual2.log" 2>&1
  rc=$?; tail -n 3 "$W/$tool-virtual2.log"; [ $rc = 0 ] || { echo "$tool: FAILED (exit $rc)"; failures=$((failures+1)); }
done

step "bad input gives a clear error"
expect_status 2 "zero heads per rank" -- "$X" attention ulysses bench --gpus "$GPUS" --heads 0 || failures=$((failures+1))
expect_status 2 "unknown store path" -- "$X" attention ulysses check --store-path dma || failures=$((failures+1))

step "xstage attention ulysses bench ${SWEEP[*]}"
timed "bench" -- timeout 400 "$X" attention ulysses bench --gpus "$GPUS" "${SWEEP[@]}" --out "$W/bench.json" || failures=$((failures+1))

step "cuDNN SDPA + NCCL all-to-all (torch), the same shapes"
if [ -f tools/attention/ulysses_torch_bench.py ]; then
  timed "torch bench" -- timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" tools/attention/ulysses_torch_bench.py "${SWEEP[@]}" \
    --out "$W/bench_torch.json" || failures=$((failures+1))
fi

step "table and figure"
python3 tools/attention/ulysses_report.py --bench "$W/bench.json" --torch "$W/bench_torch.json" --out "$W" || failures=$((failures+1))

pack "$W" ulysses
step "done: $failures failure(s)"
exit $((failures > 0))
