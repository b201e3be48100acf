#!/usr/bin/env bash
# On a machine with >= 2 NVLink GPUs: GPU tests, compute-sanitizer on small shapes (not on the timing
# tests: the sanitizer slows launches), error cases, then
# `xstage calibrate --quick --verify` and the full `xstage calibrate`, timed. Everything lands in
# ${OUT:-out}/: calibrate.log (the whole log) and calibration.tar.gz (platform files, raw CSV, reports, plots).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-out}; mkdir -p "$OUT/work"
LOG="$OUT/calibrate.log"; exec > >(tee "$LOG") 2>&1
failures=0
expect_exit() {  # expect_exit CODE PATTERN -- command...
  local want=$1 pattern=$2; shift 3
  local text rc; text=$("$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$pattern" <<<"$text"; then echo "ok   exit $rc: $(tail -n1 <<<"$text")"
  else echo "FAIL wanted exit $want with '$pattern', got $rc: $text"; failures=$((failures+1)); fi
}

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
nvidia-smi topo -m
date -u

step "GPU tests (2 ranks)"
"$XSTAGE_TEST_DIR/xstage_gpu_tests" || failures=$((failures+1))

step "compute-sanitizer memcheck on the GPU tests (small shapes)"
compute-sanitizer --tool memcheck --report-api-errors no --target-processes all \
  "$XSTAGE_TEST_DIR/xstage_gpu_tests" --gtest_filter='*Intact*:*Rejected*' 2>&1 | tail -n 30 || failures=$((failures+1))
for tool in racecheck synccheck; do
  step "compute-sanitizer $tool"
  compute-sanitizer --tool $tool --target-processes all \
    "$XSTAGE_TEST_DIR/xstage_gpu_tests" --gtest_filter='*StGlobalBursts*:*Tma*' 2>&1 | tail -n 8 || failures=$((failures+1))
done

step "bad input gives a clear error and a non-zero exit"
expect_exit 3 "needs at least 2 GPUs" -- "$XSTAGE_BIN_DIR/xstage" calibrate --gpus 1
expect_exit 3 "are visible" -- "$XSTAGE_BIN_DIR/xstage" calibrate --gpus 9
expect_exit 3 "only 1 GPU is visible" -- env CUDA_VISIBLE_DEVICES=0 "$XSTAGE_BIN_DIR/xstage" calibrate
expect_exit 2 "is not in 1..132" -- "$XSTAGE_BIN_DIR/xstage" calibrate --gpus 2 --K 500 --quick --no-plots --out "$OUT/work/bad"
expect_exit 2 "bytes is invalid" -- "$XSTAGE_BIN_DIR/xstage" calibrate --gpus 2 --B-kib 1000000 --quick --no-plots --out "$OUT/work/bad"
expect_exit 2 "not an integer" -- "$XSTAGE_BIN_DIR/xstage" calibrate --gpus 2 --K 16,x

step "xstage calibrate --quick --verify"
timed "quick calibration" -- "$XSTAGE_BIN_DIR/xstage" calibrate --quick --verify --out "$OUT/work/quick" \
  || failures=$((failures+1))

step "xstage calibrate (full)"
timed "full calibration" -- "$XSTAGE_BIN_DIR/xstage" calibrate --out "$OUT/work/full" || failures=$((failures+1))

step "xstage calibrate --pairing one-way (full)"
"$XSTAGE_BIN_DIR/xstage" calibrate --pairing one-way --no-plots --out "$OUT/work/one-way" || failures=$((failures+1))

gpus=$(nvidia-smi -L | grep -c '^GPU')
if [ "$gpus" -gt 2 ]; then  # with 2 GPUs all-peers is the ring
  step "xstage calibrate --pairing all-peers (full, $gpus GPUs)"
  "$XSTAGE_BIN_DIR/xstage" calibrate --pairing all-peers --no-plots --out "$OUT/work/all-peers" || failures=$((failures+1))
fi

tar -C "$OUT/work" -czf "$OUT/calibration.tar.gz" . && rm -rf "$OUT/work"
step "done: $failures failure(s)"
exit $((failures > 0))
