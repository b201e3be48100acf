#!/usr/bin/env bash
# The Python package at this commit on a GPU machine, split launches included: the pytest suite through the C++ kernels
# of libxstage_torch.so and its GPU tests again on the ctypes path, the diffusers examples, and the CLI's attention,
# Ulysses (two virtual ranks) and MoE checks. Takes the build directory XSTAGE_BUILD (default build/) and, where PyPI
# cannot be reached, XSTAGE_WHEELS (scripts/fetch_wheels.sh); writes everything to RESULTS (default out/).
#
#   XSTAGE_WHEELS=<dir> bash results/h100/python/2026-12-07-split-tail-torch/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
RESULTS=${RESULTS:-out}
OUT=$RESULTS
source scripts/gpu/env.sh
mkdir -p "$RESULTS"
require_build "$X" "$XSTAGE_C_LIBRARY"
[ -z "${XSTAGE_WHEELS:-}" ] || use_wheels "$XSTAGE_WHEELS" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$RESULTS/gpu.txt"
python3 -c "import torch, diffusers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'diffusers', diffusers.__version__)" \
  > "$RESULTS/versions.txt" 2>&1
failures=0
run() {  # run NAME SECONDS command...: its output in $RESULTS/NAME.log, its wall time and exit status in summary.txt
  local name=$1 limit=$2; shift 2
  local t0 rc; t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$RESULTS/$name.log" 2>&1; rc=$?
  printf '%-16s exit %3d  %6.1f s\n' "$name" "$rc" "$(awk "BEGIN{print $(date +%s.%N) - $t0}")" | tee -a "$RESULTS/summary.txt"
  [ "$rc" = 0 ] || failures=$((failures + 1))
}
run pytest 240 python3 -m pytest -q -rs -p no:cacheprovider -o junit_family=legacy tests/python --junitxml "$RESULTS/pytest.xml"
XSTAGE_TORCH_LIBRARY=none run pytest_ctypes 180 python3 -m pytest -q -rs -p no:cacheprovider -o junit_family=legacy \
  tests/python/gpu/test_attention_gpu.py -k "split or numerics or graph" --junitxml "$RESULTS/pytest_ctypes.xml"
run diffusers_attn 120 python3 examples/diffusers/attention.py
run diffusers_moe 120 python3 examples/diffusers/moe.py
run attention_check 120 "$X" attention check --out "$RESULTS/attention_check.json"
run ulysses_check 60 "$X" attention ulysses check --virtual-ranks 2 --quick --device-timeout-s 5
run moe_check 150 "$X" moe check --gpus 1 --out "$RESULTS/moe_check.json"
echo "failures: $failures" | tee -a "$RESULTS/summary.txt"
# The logs and test reports in one archive (results/README.md), beside gpu.txt, summary.txt and the checks' JSONs.
(cd "$RESULTS" && tar -cf - ./*.log ./*.xml versions.txt | xz -9e > run.tar.xz && rm -f ./*.log ./*.xml versions.txt)
exit "$failures"
