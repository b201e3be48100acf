#!/usr/bin/env bash
# The X-Stage calibration on a GPU machine (at least 2 NVLink GPUs):
#   1. the GPU tests (2 ranks), and compute-sanitizer memcheck, racecheck and synccheck on their small shapes (not
#      on the timing tests: the sanitizer slows launches);
#   2. bad input: a clear error and the documented exit status;
#   3. `xstage calibrate --quick --verify`, the full `xstage calibrate` (both timed), one-way, and all-peers with
#      more than 2 GPUs.
# Knobs: XSTAGE_BUILD and OUT (scripts/gpu/env.sh).
# Writes $OUT/calibrate.log and $OUT/calibrate.tar.xz (per sweep: platform.json, samples.csv, report.json, plots/).
#
#   bash scripts/gpu/calibrate.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to calibrate
W="$OUT/calibrate"; mkdir -p "$W"
TESTS="$XSTAGE_BUILD/tests/xstage_gpu_tests"
require_build "$X" "$TESTS"
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
nvidia-smi topo -m
date -u

step "GPU tests (2 ranks)"
"$TESTS" || failures=$((failures+1))

step "compute-sanitizer memcheck on the GPU tests (small shapes)"
compute-sanitizer --tool memcheck --report-api-errors no --target-processes all \
  "$TESTS" --gtest_filter='*Intact*:*Rejected*' 2>&1 | tail -n 30 || failures=$((failures+1))
for tool in racecheck synccheck; do
  step "compute-sanitizer $tool"
  compute-sanitizer --tool $tool --target-processes all \
    "$TESTS" --gtest_filter='*StGlobalBursts*:*Tma*' 2>&1 | tail -n 8 || failures=$((failures+1))
done

step "bad input gives a clear error and a non-zero exit"
expect_status 2 "must be an integer in \[2," -- "$X" calibrate --gpus 1 || failures=$((failures+1))
expect_status 3 "are visible" -- "$X" calibrate --gpus 9 || failures=$((failures+1))
expect_status 3 "only 1 GPU is visible" -- env CUDA_VISIBLE_DEVICES=0 "$X" calibrate || failures=$((failures+1))
expect_status 2 "is not in 1..132" -- "$X" calibrate --gpus 2 --K 500 --quick --no-plots --out "$W/bad" || failures=$((failures+1))
expect_status 2 "bytes is invalid" -- "$X" calibrate --gpus 2 --B-kib 1000000 --quick --no-plots --out "$W/bad" || failures=$((failures+1))
expect_status 2 "not an integer" -- "$X" calibrate --gpus 2 --K 16,x || failures=$((failures+1))

step "xstage calibrate --quick --verify"
timed "quick calibration" -- "$X" calibrate --quick --verify --out "$W/quick" \
  || failures=$((failures+1))

step "xstage calibrate (full)"
timed "full calibration" -- "$X" calibrate --out "$W/full" || failures=$((failures+1))

step "xstage calibrate --pairing one-way (full)"
"$X" calibrate --pairing one-way --no-plots --out "$W/one-way" || failures=$((failures+1))

if [ "$GPUS" -gt 2 ]; then  # with 2 GPUs all-peers is the ring
  step "xstage calibrate --pairing all-peers (full, $GPUS GPUs)"
  "$X" calibrate --pairing all-peers --no-plots --out "$W/all-peers" || failures=$((failures+1))
fi

pack "$W" calibrate
step "done: $failures failure(s)"
exit $((failures > 0))
