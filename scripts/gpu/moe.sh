#!/usr/bin/env bash
# On a machine with >= 2 NVLink GPUs: `xstage moe check` (all cases, both GEMM paths), compute-sanitizer
# memcheck on a tiny check, then `xstage moe bench` on a subset of configs/moe_grid.json
# (MOE_BENCH_FILTER, MOE_BENCH_GEMM; about 2 minutes by default). Everything lands in ${OUT:-out}/:
# moe.log (the whole log) and moe.tar.gz (check.json, bench.json, sanitizer log).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
XSTAGE_BIN_DIR=${XSTAGE_MOE_BIN_DIR:-$XSTAGE_BIN_DIR}
OUT=${OUT:-out}; mkdir -p "$OUT/work"
LOG="$OUT/moe.log"; exec > >(tee "$LOG") 2>&1
FILTER=${MOE_BENCH_FILTER:-deepseek-v3:,h1152-i4608-e8-k2/t2048,h2048-i768-e128-k8/t2048}
GEMM=${MOE_BENCH_GEMM:-loop}
X="$XSTAGE_BIN_DIR/xstage"
GPUS=${GPUS:-$(nvidia-smi -L | grep -c '^GPU')}  # EP over every visible GPU unless GPUS says otherwise
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
date -u
ldd "$X" | grep -E "cublas|nccl" || true

step "xstage moe check (all cases, loop and grouped GEMMs)"
timed "check" -- "$X" moe check --gpus "$GPUS" --out "$OUT/work/check.json" || failures=$((failures+1))

step "compute-sanitizer memcheck on a tiny check"
# Slow: the sanitizer instruments every cuBLAS module (it took most of a 280 s run on H200x2).
compute-sanitizer --tool memcheck --report-api-errors no --target-processes all \
  "$X" moe check --gpus "$GPUS" --cases k2-balanced,k5-empty --gemm both > "$OUT/work/memcheck.log" 2>&1
rc=$?; tail -n 12 "$OUT/work/memcheck.log"; [ $rc = 0 ] || failures=$((failures+1))

step "bad input gives a clear error"
"$X" moe bench --gpus "$GPUS" --filter no-such-config; echo "exit $? (want 2)"

step "xstage moe bench --filter $FILTER --gemm $GEMM"
timed "bench" -- "$X" moe bench --gpus "$GPUS" --gemm "$GEMM" --filter "$FILTER" --out "$OUT/work/bench.json" \
  || failures=$((failures+1))

tar -C "$OUT/work" -czf "$OUT/moe.tar.gz" . && rm -rf "$OUT/work"
step "done: $failures failure(s)"
exit $((failures > 0))
