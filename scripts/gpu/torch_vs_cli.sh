#!/usr/bin/env bash
# The ops through torch against the same kernels through the CLI, on a GPU machine (one GPU):
#   1. where an eager call's host time goes (tools/python/host_costs.py), beside SDPA: through the C++ kernels of
#      libxstage_torch.so where it is built (host_costs.json), and on the ctypes path (host_costs_ctypes.json);
#   2. each op timed through torch (tools/python/time_ops.py) beside the same kernels timed by the CLI (`xstage
#      attention bench`, `xstage moe bench`), in ROUNDS interleaved rounds of the same protocol, the SM clock and
#      power sampled by nvidia-smi meanwhile;
#   3. the ratios per round (tools/python/torch_vs_cli.py: torch_vs_cli.txt).
# Knobs (besides XSTAGE_BUILD and OUT: scripts/gpu/env.sh; the Python package needs torch):
#   ROUNDS  rounds (default 3)
# Writes $OUT/torch_vs_cli.log and $OUT/torch_vs_cli.tar.xz (host_costs.json, host_costs_ctypes.json, per round i
# time_ops_<i>.json, attention_bench_<i>.json, moe_bench_<i>.json; clocks.csv, torch_vs_cli.txt and .json).
#
#   bash scripts/gpu/torch_vs_cli.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
log_to torch_vs_cli
W="$OUT/torch_vs_cli"; mkdir -p "$W"
require_build "$X" "$XSTAGE_C_LIBRARY"
ROUNDS=${ROUNDS:-3}
failures=0
step "host time of an eager flash_attention and moe call, piece by piece"
timed "host_costs" -- timeout 300 python3 tools/python/host_costs.py --out "$W/host_costs.json" || failures=$((failures+1))
XSTAGE_TORCH_LIBRARY=none timed "host_costs, ctypes path" -- timeout 300 python3 tools/python/host_costs.py \
  --out "$W/host_costs_ctypes.json" || failures=$((failures+1))
step "the ops through torch and the same kernels through the CLI: $ROUNDS interleaved round(s), SM clock sampled"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 > "$W/clocks.csv" &
clocks=$!
for i in $(seq 1 "$ROUNDS"); do
  timed "time_ops $i" -- timeout 300 python3 tools/python/time_ops.py --moe-dtypes bf16 --schedules auto,interleaved \
    --out "$W/time_ops_$i.json" || failures=$((failures+1))
  timed "attention bench $i" -- timeout 120 "$X" attention bench --seqlens 8192 --heads 4,12 --head-dims 128,64 \
    --out "$W/attention_bench_$i.json" || failures=$((failures+1))
  timed "moe bench $i" -- timeout 200 "$X" moe bench --gpus 1 --dtype bf16 --filter "deepseek-v3:h7168-i2048-e256-k8/t4096/balanced" \
    --impl megamoe-auto,megamoe-interleaved --out "$W/moe_bench_$i.json" || failures=$((failures+1))
done
kill "$clocks"
python3 tools/python/torch_vs_cli.py "$W" | tee "$W/torch_vs_cli.txt" || failures=$((failures+1))
pack "$W" torch_vs_cli
step "done: $failures failure(s)"
exit $((failures > 0))
