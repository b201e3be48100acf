#!/usr/bin/env bash
# Two builds of the attention kernel on one GPU: BASE (main) and NEW (the 192-row d = 64 configuration with 192 key rows
# per step and P in shared memory). `rounds`: two rounds of scripts/gpu/attention_variants.sh (each build's attention
# check, then both builds and cuDNN in turn, CUDA-graph replays) on the d = 64 shapes and two controls; `checks`: NEW
# under compute-sanitizer memcheck and racecheck (quick shapes) and the Ulysses checks with 2 and 4 virtual ranks
# (fused bit-identical to serial). Writes everything under RESULTS (default out/). STEPS: which parts, in order
# (default "rounds checks"); ROUNDS: how many rounds (default 2); SHAPES: those of the rounds (the bench's --shapes).
#
#   xz -dc results/h100/attention/2026-12-07-p-in-smem/p-in-smem.patch.xz | git apply   # in a copy of main, built as NEW_BUILD
#   bash results/h100/attention/2026-12-07-p-in-smem/run.sh BASE_BUILD NEW_BUILD
set -u
cd "$(dirname "$0")/../../../.." || exit 1
BASE=${1:?base build directory}; NEW=${2:?new build directory}
R=${RESULTS:-out}; mkdir -p "$R"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > "$R/gpu.txt" 2>&1
checks() {
  {
    for tool in memcheck racecheck; do
      timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$NEW/xstage" attention check --quick --seed 7 2>&1 | tail -n 3
      echo "sanitizer $tool rc=${PIPESTATUS[0]}"
    done
    for p in 2 4; do
      timeout 300 "$NEW/xstage" attention ulysses check --virtual-ranks "$p" --seed 11 --out "$R/ulysses_check_$p.json" 2>&1 | tail -n 4
      echo "ulysses check virtual $p rc=${PIPESTATUS[0]}"
    done
  } > "$R/checks.log" 2>&1
  cat "$R/checks.log"
}
rounds() {
  export SHAPES=${SHAPES:-"1,16384,12,64;2,4250,24,64;1,4096,12,64;1,32768,12,64;1,8192,4,64;1,16896,24,128"}
  for r in $(seq "${ROUNDS:-2}"); do
    OUT="$R/round$r" REPS=16 EXTRA=cudnn bash scripts/gpu/attention_variants.sh base="$BASE" psmem="$NEW" > "$R/round$r.log" 2>&1
    echo "round $r rc=$?"; tail -n 14 "$R/round$r/attention_variants.log"
  done
}
for step in ${STEPS:-rounds checks}; do
  case $step in
    rounds|checks) "$step" ;;
    *) echo "run.sh: unknown step '$step' in STEPS (rounds, checks)" >&2; exit 2 ;;
  esac
done
