#!/usr/bin/env bash
# Configures and builds everything (host code and CUDA for sm_90a) into build/ (BUILD_DIR=... moves it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_PYTHON="$XSTAGE_PYTHON"
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
