#!/usr/bin/env bash
# Installs what xstage needs to build, skipping whatever is already present (so it also works on a
# prepared machine without network). Versions are pinned here and nowhere else.
set -euo pipefail

APT_PACKAGES=(cmake ninja-build g++ libcli11-dev nlohmann-json3-dev libgtest-dev)
PIP_PACKAGES=("nvidia-cutlass==4.2.0.0" "matplotlib==3.11.2")

missing_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing_apt+=("$pkg")
done
if ((${#missing_apt[@]})); then
  echo "setup: installing Debian packages: ${missing_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_apt[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
missing_pip=()
for spec in "${PIP_PACKAGES[@]}"; do
  name=${spec%%==*}; want=${spec##*==}
  have=$("$PYTHON" -m pip show "$name" 2>/dev/null | awk '/^Version:/{print $2}')
  [ "$have" = "$want" ] || missing_pip+=("$spec")
done
if ((${#missing_pip[@]})); then
  echo "setup: installing Python packages: ${missing_pip[*]}"
  "$PYTHON" -m pip install -q --disable-pip-version-check "${missing_pip[@]}"
fi

command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "setup: error: the CUDA toolkit (nvcc) was not found; install CUDA 13.0 with NCCL 2.28" >&2; exit 1; }
