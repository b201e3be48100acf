#!/usr/bin/env bash
# The README's main command. Sets up and builds, then:
#  - on a machine with >= 2 GPUs joined by NVLink: measures the X-Stage (`xstage calibrate`), prints the
#    platform triple M_X = (T_iss0, R, Q) with its validation, and plans a few kernels on it;
#  - otherwise: says that no (second) GPU was found and runs the planner on the shipped platform file.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
XSTAGE=build/xstage

gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
platform=platforms/h200_nvlink4.json
if [ "$gpus" -ge 2 ]; then
  source scripts/gpu/env.sh
  out=results/local/calibration-$(date -u +%Y%m%dT%H%M%SZ)
  "$XSTAGE" calibrate --out "$out"
  platform=$out/platform.json
else
  if [ "$gpus" -eq 1 ]; then
    echo "xstage: found 1 GPU; calibration needs 2 GPUs joined by NVLink (remote stores go to a peer)."
  else
    echo "xstage: no GPU found on this machine; showing the planner on the shipped platform file $platform."
  fi
  echo "        On a machine with >= 2 NVLink GPUs this command runs 'xstage calibrate' instead."
fi

echo
echo "== xstage plan: a burst pattern (132 producers x 8 KiB) over a gap sweep"
"$XSTAGE" plan --platform "$platform" pattern -K 132 -B 8KiB -G 0,1us,2us,3us,4us
echo
echo "== xstage plan: a fine-grained MegaMoE layer (DeepSeek-V3-like expert: h = 7168, h_inter = 2048)"
"$XSTAGE" plan --platform "$platform" moe -K 66 --hidden 7168 --inter 2048 --tflops 700
echo
echo "== xstage plan: FlashAttention with the Ulysses all-to-all in its epilogue"
"$XSTAGE" plan --platform "$platform" attention -M 1024,4096,16384 --tflops 550 --heads 12
