#!/usr/bin/env bash
# main as it is, call 1 of 3: every attention check (the plain kernel, the Ulysses paths at one real rank and at 2, 4,
# 8 virtual ranks), a 1000-call soak, memcheck and racecheck, then the Ulysses sweep at P = 1 (every destination local:
# the fused epilogue's cost) beside cuDNN SDPA + NCCL all-to-all, and its tables.
#   XSTAGE_BUILD=build RESULTS=<dir> bash results/h100/attention/2026-12-07-main-state/call1.sh   (from the repository root)
set -u
source scripts/gpu/env.sh
O=$(mktemp -d); R=${RESULTS:-.}; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit,driver_version --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/call1.tar.xz -C $O . ; }
P2=(--paths fused_post,fused_both)
timeout 120 $X attention check --out $O/attention_check.json > $O/attention_check.log 2>&1; log "attention check rc=$? :: $(tail -n1 $O/attention_check.log)"
timeout 120 $X attention ulysses check --gpus 1 "${P2[@]}" --out $O/check_real.json > $O/check_real.log 2>&1; log "ulysses check real rc=$? :: $(tail -n1 $O/check_real.log)"
for P in 2 4 8; do
  timeout 120 $X attention ulysses check --virtual-ranks $P "${P2[@]}" --out $O/check_v$P.json > $O/check_v$P.log 2>&1
  log "ulysses check virtual $P rc=$? :: $(tail -n1 $O/check_v$P.log)"
done
timeout 120 $X attention ulysses check --virtual-ranks 2 "${P2[@]}" --quick --launches 1000 --device-timeout-s 5 \
  --out $O/soak_v2.json > $O/soak_v2.log 2>&1; log "soak 1000 virtual 2 rc=$? :: $(tail -n1 $O/soak_v2.log)"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $X attention check --quick \
    > $O/$tool-attention.log 2>&1; log "$tool attention rc=$? :: $(tail -n1 $O/$tool-attention.log)"
  timeout 200 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $X attention ulysses check \
    --virtual-ranks 2 "${P2[@]}" --quick --launches 1 --device-timeout-s 200 > $O/$tool-v2.log 2>&1
  log "$tool ulysses virtual 2 rc=$? :: $(tail -n1 $O/$tool-v2.log)"
done
SWEEP=(--seqlens 4096,8192,16384,32768,65536 --heads 4,12 --head-dims 128,64 --trials 10 --replays 5)
timeout 200 $X attention ulysses bench --gpus 1 "${SWEEP[@]}" --out $O/bench.json > $O/bench.log 2>&1; log "ulysses bench P=1 rc=$?"
timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 1 tools/attention/ulysses_torch_bench.py "${SWEEP[@]}" \
  --out $O/bench_torch.json > $O/bench_torch.log 2>&1; log "cuDNN SDPA + NCCL bench rc=$?"
python3 tools/attention/ulysses_report.py --bench $O/bench.json --torch $O/bench_torch.json --out $O/report > $O/report.log 2>&1
log "report rc=$?"
xz -9 $O/*.log 2>/dev/null; log done
