#!/usr/bin/env bash
# The attention forward on a GPU machine (one GPU: GPU 0):
#   1. `xstage attention check` (all cases);
#   2. `xstage attention bench` (the CLI's own timing);
#   3. cuDNN SDPA and xstage's kernel timed in turn in one process, the two alone so that neither gains power
#      headroom from a third, xstage through the Python package and the C library (tools/attention/cudnn_bench.py);
#   4. the merged table (tools/attention/merge_bench.py: summary.md);
#   5. compute-sanitizer memcheck, racecheck and synccheck on `attention check --quick`.
# Knobs: XSTAGE_BUILD and OUT (scripts/gpu/env.sh), and the argument
#   --quick-bench  the benches at M = 8192 and 32768, 12 heads only
# Writes $OUT/attention.log and $OUT/attention.tar.xz (check.json, bench_xstage.json, bench_cudnn.json,
# summary.md, sanitizer.log).
#
#   bash scripts/gpu/attention.sh [--quick-bench]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to attention
W="$OUT/attention"; mkdir -p "$W"
require_build "$X" "$XSTAGE_C_LIBRARY"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
BENCH_ARGS=()
[[ "${1:-}" == "--quick-bench" ]] && BENCH_ARGS=(--seqlens 8192,32768 --heads 12)
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
date -u
command -v cuobjdump >/dev/null && echo "HGMMA instructions in $X: $(cuobjdump --dump-sass "$X" 2>/dev/null | grep -c HGMMA)"

step "xstage attention check"
timeout 100 "$X" attention check --out "$W/check.json"
check_rc=$?
[ $check_rc = 0 ] || failures=$((failures+1))
[ $check_rc = 124 ] && echo "check timed out (a hang): the kernel's bench and the sanitizers are skipped"

if [ $check_rc != 124 ]; then
  step "xstage attention bench"
  timed "bench" -- timeout 120 "$X" attention bench "${BENCH_ARGS[@]}" --out "$W/bench_xstage.json" || failures=$((failures+1))
fi

step "torch SDPA's cuDNN backend and xstage's kernel, in turn"
timed "cuDNN bench" -- timeout 150 python3 tools/attention/cudnn_bench.py "${BENCH_ARGS[@]}" --json "$W/bench_cudnn.json" \
  || failures=$((failures+1))
nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv

step "summary"
if [[ -f "$W/bench_xstage.json" && -f "$W/bench_cudnn.json" ]]; then
  python3 tools/attention/merge_bench.py "$W/bench_xstage.json" "$W/bench_cudnn.json" --markdown "$W/summary.md" \
    || failures=$((failures+1))
fi

if [ $check_rc != 124 ]; then
  step "compute-sanitizer (attention check --quick)"
  : > "$W/sanitizer.log"
  for tool in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool "$tool" --error-exitcode 9 "$X" attention check --quick --seed 7 >> "$W/sanitizer.log" 2>&1
    rc=$?
    echo "sanitizer $tool: rc=$rc ($(grep -c 'ERROR SUMMARY: 0 errors' "$W/sanitizer.log") clean summaries so far)"
    [ $rc = 0 ] || failures=$((failures+1))
  done
  grep -h "ERROR SUMMARY" "$W/sanitizer.log"
fi

pack "$W" attention
step "done: $failures failure(s)"
exit $((failures > 0))
