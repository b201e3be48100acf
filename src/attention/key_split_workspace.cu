// The split tail's workspace (key_split_workspace.hpp).
#include "attention/key_split_workspace.hpp"

#include <limits>
#include <mutex>
#include <vector>

#include "common/cuda_check.hpp"

namespace xstage::attention {

float* key_split_workspace_alloc(KeySplitWorkspace const& w, cudaStream_t stream) {
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;  // by device, created at first use, kept for the process
  int device = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool{};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (pools.size() <= static_cast<std::size_t>(device)) pools.resize(device + 1, nullptr);
    if (pools[device] == nullptr) {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      XSTAGE_CUDA_CHECK(cudaMemPoolCreate(&pools[device], &props));
      std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();  // never hand memory back between calls
      XSTAGE_CUDA_CHECK(cudaMemPoolSetAttribute(pools[device], cudaMemPoolAttrReleaseThreshold, &keep));
    }
    pool = pools[device];
  }
  void* p = nullptr;
  XSTAGE_CUDA_CHECK(cudaMallocFromPoolAsync(&p, static_cast<std::size_t>(w.bytes()), pool, stream));
  float* workspace = static_cast<float*>(p);
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(workspace + w.arrivals_offset(), 0, std::size_t(w.tail_tiles) * sizeof(int), stream));
  return workspace;
}

void key_split_workspace_free(float* workspace, cudaStream_t stream) { XSTAGE_CUDA_CHECK(cudaFreeAsync(workspace, stream)); }

}  // namespace xstage::attention
