# Sourced by the GPU scripts: the environment every xstage run on a GPU machine needs.
# Multicast (NVLS) stays off: it can take down a shared host.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The binaries link libnccl.so.2; on machines where NCCL comes from PyPI, point the loader at it.
if NCCL_PIP_LIB=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null); then
  export LD_LIBRARY_PATH="$NCCL_PIP_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# Prebuilt binaries (carried from a build machine) or the local build.
XSTAGE_BIN_DIR=${XSTAGE_BIN_DIR:-$( [ -x .carry/bin/xstage ] && echo .carry/bin || echo build )}
XSTAGE_TEST_DIR=${XSTAGE_TEST_DIR:-$( [ -x .carry/bin/xstage_gpu_tests ] && echo .carry/bin || echo build/tests )}
