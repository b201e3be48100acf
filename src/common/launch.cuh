// Kernel launches whose errors are the launch's own. `kernel<<<...>>>` followed by cudaGetLastError() reads
// the thread's last-error slot, which also holds errors left there by other code (NCCL's start-up probes,
// a framework's earlier launch); cudaLaunchKernelEx returns the error of this launch alone and leaves the
// slot to whoever owns it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "common/cuda_check.hpp"

namespace xstage {

template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, std::size_t smem_bytes, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  XSTAGE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace xstage
