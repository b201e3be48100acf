#!/usr/bin/env bash
# On a GPU machine: each op timed through torch (tools/time_ops.py) beside the same kernels timed by
# the CLI (`xstage attention bench`, `xstage moe bench`), in $ROUNDS (default 3) interleaved rounds of the same
# protocol, the SM clock and power sampled by nvidia-smi meanwhile; then the ratios per round
# (tools/torch_vs_cli.py); first, where an eager call's host time goes (tools/host_costs.py).
# Needs what scripts/gpu/python.sh needs (the C library, the binaries).
# Everything lands in ${OUT:-out}/torch-vs-cli/ (scripts/gpu/python.sh packs it with its own results).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-out}; W="$OUT/torch-vs-cli"; mkdir -p "$W"
ROUNDS=${ROUNDS:-3}
X="$XSTAGE_BIN_DIR/xstage"
LIB=${XSTAGE_C_LIBRARY:-$( [ -f .carry/python/libxstage_c.so ] && echo .carry/python/libxstage_c.so || echo build/libxstage_c.so )}
export XSTAGE_C_LIBRARY=$(realpath "$LIB") PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
failures=0
step "host time of an eager flash_attention call, piece by piece"
timed "host_costs" -- timeout 300 python3 tools/host_costs.py --out "$W/host_costs.json" || failures=$((failures+1))
step "the ops through torch and the same kernels through the CLI: $ROUNDS interleaved round(s), SM clock sampled"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 > "$W/clocks.csv" &
clocks=$!
for i in $(seq 1 "$ROUNDS"); do
  timed "time_ops $i" -- timeout 300 python3 tools/time_ops.py --moe-dtypes bf16 --schedules auto,interleaved \
    --out "$W/time_ops_$i.json" || failures=$((failures+1))
  timed "attention bench $i" -- timeout 120 "$X" attention bench --seqlens 8192 --heads 4,12 --head-dims 128,64 \
    --out "$W/attention_bench_$i.json" || failures=$((failures+1))
  timed "moe bench $i" -- timeout 200 "$X" moe bench --gpus 1 --dtype bf16 --filter "deepseek-v3:h7168-i2048-e256-k8/t4096/balanced" \
    --impl megamoe-auto,megamoe-interleaved --out "$W/moe_bench_$i.json" || failures=$((failures+1))
done
kill "$clocks"
python3 tools/torch_vs_cli.py "$W" | tee "$W/torch_vs_cli.txt" || failures=$((failures+1))
step "torch vs CLI done: $failures failure(s)"
exit $((failures > 0))
