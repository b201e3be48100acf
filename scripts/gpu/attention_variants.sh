#!/usr/bin/env bash
# An A/B of builds of the attention kernel on a GPU machine (one GPU: GPU 0), in one process and in turn:
#   1. each build runs the full `xstage attention check`;
#   2. every build's libxstage_c.so is loaded beside the others (tools/attention/cudnn_bench.py --xstage-lib) and
#      timed in turn with cuDNN SDPA (and FlashAttention-4 where flash_attn.cute imports) on the same inputs, as
#      CUDA-graph replays (TIMING=eager: eager calls), every output compared with the first build's; builds timed
#      in separate processes one after the other would compare the power-capped clock as much as the kernels;
#   3. a table of TFLOP/s per shape and backend with the ratio to the first build, and the geometric mean.
# Name one build twice (A=build B=build) to see the noise floor of the comparison.
# Arguments (the builds are given here instead of XSTAGE_BUILD; OUT: scripts/gpu/env.sh): NAME=BUILD_DIR ...
# Knobs: SHAPES ('dit', the default, or 'B,M,H,d;...'), REPS (timings per backend and shape, default 15, rounded up to
#   whole periods of the balanced turn order), TIMING,
#   EXTRA (other backends, default: cudnn, and fa4 where it imports), ENERGY_S (seconds per backend and round of
#   NVML energy windows after each shape's timings, tools/common/energy.py; default 0: none).
# Writes $OUT/attention_variants.log and $OUT/attention_variants.tar.xz (check logs, bench.json, summary.md).
#
#   bash scripts/gpu/attention_variants.sh base=build-A chains=build-B
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
(($#)) || { echo "error: name at least one build as NAME=BUILD_DIR" >&2; exit 2; }
log_to attention_variants
W="$OUT/attention_variants"; mkdir -p "$W"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
libs=() backends=()
for item in "$@"; do
  require_build "${item#*=}/xstage" "${item#*=}/libxstage_c.so"
  libs+=(--xstage-lib "${item%%=*}=$(realpath "${item#*=}/libxstage_c.so")") backends+=("xstage:${item%%=*}")
done
failures=0

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv

step "xstage attention check, each build"
for item in "$@"; do
  timeout 120 "${item#*=}/xstage" attention check > "$W/check_${item%%=*}.log" 2>&1
  rc=$?; [ $rc = 0 ] || failures=$((failures+1))
  echo "${item%%=*}: exit $rc :: $(tail -n 1 "$W/check_${item%%=*}.log")"
done

step "in turn, one process"
extra=${EXTRA:-cudnn$(python3 -c "import flash_attn.cute.interface" 2>/dev/null && echo ,fa4)}
XSTAGE_C_LIBRARY=$(realpath "${1#*=}/libxstage_c.so") python3 tools/attention/cudnn_bench.py --timing "${TIMING:-graph}" \
  --shapes "${SHAPES:-dit}" --reps "${REPS:-15}" "${libs[@]}" --backends "$(IFS=,; echo "${backends[*]}"),$extra" \
  --energy-s "${ENERGY_S:-0}" --json "$W/bench.json" --markdown "$W/summary.md" || failures=$((failures+1))

pack "$W" attention_variants
echo "done: $failures failure(s)"
exit $((failures > 0))
