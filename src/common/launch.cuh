// Kernel launches whose errors are the launch's own. `kernel<<<...>>>` followed by cudaGetLastError() reads
// the thread's last-error slot, which also holds errors left there by other code (NCCL's start-up probes,
// a framework's earlier launch); cudaLaunchKernelEx returns the error of this launch alone and leaves the
// slot to whoever owns it. Every kernel of xstage is launched here.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "common/cuda_check.hpp"

namespace xstage {

// What a launch may ask for beyond grid, block and shared memory.
struct LaunchOptions {
  unsigned cluster_x = 1;    // thread-block clusters of this many CTAs along x (1: no clusters)
  bool cooperative = false;  // every CTA resident at once (they wait on each other): the launch fails instead of hanging
  // Programmatic dependent launch: the kernel may start while the kernel before it on the stream still runs, and
  // must call wait_for_prior_grids() before it touches memory earlier work writes or reads (common/grid_dependency.cuh).
  bool early_start = false;
};

// The launch of a kernel that may start early (it calls wait_for_prior_grids() first).
inline constexpr LaunchOptions kEarlyStart{.early_start = true};

template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, std::size_t smem_bytes, LaunchOptions options,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[3] = {};
  unsigned n = 0;
  if (options.cooperative) {
    attrs[n].id = cudaLaunchAttributeCooperative;
    attrs[n++].val.cooperative = 1;
  }
  if (options.cluster_x > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = options.cluster_x;
    attrs[n].val.clusterDim.y = 1;
    attrs[n++].val.clusterDim.z = 1;
  }
  if (options.early_start) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attrs;
  config.numAttrs = n;
  XSTAGE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, std::size_t smem_bytes, cudaStream_t stream,
                   Args&&... args) {
  launch_kernel(kernel, grid, block, smem_bytes, LaunchOptions{}, stream, std::forward<Args>(args)...);
}

}  // namespace xstage
