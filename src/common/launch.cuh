// Kernel launches whose errors are the launch's own. `kernel<<<...>>>` followed by cudaGetLastError() reads
// the thread's last-error slot, which also holds errors left there by other code (NCCL's start-up probes,
// a framework's earlier launch); cudaLaunchKernelEx returns the error of this launch alone and leaves the
// slot to whoever owns it. Every kernel of xstage is launched here.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "common/cuda_check.hpp"
#include "common/error.hpp"

namespace xstage {

// What a launch may ask for beyond grid, block and shared memory.
struct LaunchOptions {
  unsigned cluster_x = 1;    // thread-block clusters of this many CTAs along x (1: no clusters)
  bool cooperative = false;  // every CTA resident at once (they wait on each other): the launch fails instead of hanging
};

template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, std::size_t smem_bytes, LaunchOptions options,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
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
  config.attrs = attrs;
  config.numAttrs = n;
  XSTAGE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// How many thread-block clusters of one kernel can be resident at once (cudaOccupancyMaxActiveClusters: a GPC's SMs
// need not all pair up), asked once per device (0..63) and kept: each launcher holds one next to its kernel.
class ResidentClusters {
 public:
  int get(const void* kernel, unsigned cluster_x, unsigned threads, std::size_t smem_bytes, int device) {
    if (device >= 0 && device < kDevices) {
      const int known = known_[device].load(std::memory_order_relaxed);
      if (known > 0) return known;
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(cluster_x);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem_bytes;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster_x;
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    XSTAGE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    if (clusters <= 0) throw PlatformError("no cluster of " + std::to_string(cluster_x) + " CTAs of this kernel fits on the device");
    if (device >= 0 && device < kDevices) known_[device].store(clusters, std::memory_order_relaxed);
    return clusters;
  }

 private:
  static constexpr int kDevices = 64;
  std::atomic<int> known_[kDevices] = {};
};

template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, std::size_t smem_bytes, cudaStream_t stream,
                   Args&&... args) {
  launch_kernel(kernel, grid, block, smem_bytes, LaunchOptions{}, stream, std::forward<Args>(args)...);
}

}  // namespace xstage
