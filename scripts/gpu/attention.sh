#!/usr/bin/env bash
# On the GPU machine: attention correctness check, xstage bench, cuDNN SDPA bench (with xstage's kernel timed in
# turn with cuDNN in the same process, the two alone so that neither gains power headroom from a third, through the Python package and the C library: XSTAGE_C_LIBRARY, default
# .carry/python/libxstage_c.so, else build/libxstage_c.so), merged table, then compute-sanitizer (memcheck,
# racecheck, synccheck) on a small shape. Everything lands under $OUT; copy it into
# results/h200/attention/<date>/ in the repository (the last lines say so).
#
#   XSTAGE_BIN=build/xstage OUT=/tmp/out scripts/gpu/attention.sh [--quick-bench]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${XSTAGE_BIN:-build/xstage}
OUT=${OUT:-/tmp/xstage-attention}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
LIB=${XSTAGE_C_LIBRARY:-$( [ -f .carry/python/libxstage_c.so ] && echo .carry/python/libxstage_c.so || echo build/libxstage_c.so )}
export XSTAGE_C_LIBRARY=$(realpath "$LIB") PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
BENCH_ARGS=()
[[ "${1:-}" == "--quick-bench" ]] && BENCH_ARGS=(--seqlens 8192,32768 --heads 12)
LOG="$OUT/run.log"
status=0

{
  echo "== $(date -u +%FT%TZ) $BIN on $(hostname)"
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
  command -v cuobjdump >/dev/null && echo "HGMMA instructions in $BIN: $(cuobjdump --dump-sass "$BIN" 2>/dev/null | grep -c HGMMA)"
} 2>&1 | tee "$LOG"

echo "== check" | tee -a "$LOG"
timeout 100 "$BIN" attention check --out "$OUT/check.json" 2>&1 | tee -a "$LOG"
check_rc=${PIPESTATUS[0]}
[[ $check_rc -ne 0 ]] && status=1

if [[ $check_rc -eq 124 ]]; then
  echo "check timed out (a hang): skipping sanitizer and xstage bench" | tee -a "$LOG"
  SKIP_KERNEL=1
fi
echo "== bench (xstage)" | tee -a "$LOG"
if [[ -z "${SKIP_KERNEL:-}" ]]; then
  timeout 120 "$BIN" attention bench "${BENCH_ARGS[@]}" --out "$OUT/bench_xstage.json" 2>&1 | tee -a "$LOG"
  bench_rc=${PIPESTATUS[0]}
  [[ $bench_rc -ne 0 ]] && { echo "xstage attention bench failed: rc=$bench_rc" | tee -a "$LOG"; status=1; }
fi
echo "== bench (torch SDPA's cuDNN backend and xstage's kernel, in turn)" | tee -a "$LOG"
timeout 150 python3 tools/attention_cudnn_bench.py "${BENCH_ARGS[@]}" --json "$OUT/bench_cudnn.json" 2>&1 | tee -a "$LOG"
cudnn_rc=${PIPESTATUS[0]}
[[ $cudnn_rc -ne 0 ]] && { echo "cuDNN bench failed: rc=$cudnn_rc" | tee -a "$LOG"; status=1; }
nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv 2>&1 | tee -a "$LOG"

echo "== summary (check rc=$check_rc)" | tee -a "$LOG"
if [[ -f "$OUT/bench_xstage.json" && -f "$OUT/bench_cudnn.json" ]]; then
  python3 tools/attention_merge.py "$OUT/bench_xstage.json" "$OUT/bench_cudnn.json" --markdown "$OUT/summary.md" 2>&1 | tee -a "$LOG"
fi
echo "== compute-sanitizer (attention check --quick)" | tee -a "$LOG"
: > "$OUT/sanitizer.log"
for tool in memcheck racecheck synccheck; do
  [[ -n "${SKIP_KERNEL:-}" ]] && break
  timeout 90 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN" attention check --quick --seed 7 \
    >> "$OUT/sanitizer.log" 2>&1
  rc=$?
  echo "sanitizer $tool: rc=$rc ($(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/sanitizer.log") clean summaries so far)" | tee -a "$LOG"
  [[ $rc -ne 0 ]] && status=1
done

grep -h "ERROR SUMMARY" "$OUT/sanitizer.log" | tee -a "$LOG"
[[ -f "$OUT/summary.md" ]] && cat "$OUT/summary.md"
echo "Copy $OUT/* into results/h200/attention/<date>/ and commit it with this command line." | tee -a "$LOG"
exit $status
