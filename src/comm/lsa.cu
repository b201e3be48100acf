// Device-side helpers that need NCCL's device API.
#include <nccl_device.h>

#include "comm/runtime.hpp"
#include "common/cuda_check.hpp"
#include "common/launch.cuh"

namespace xstage::comm {

namespace {
__global__ void resolve_lsa_pointer_kernel(ncclWindow_t window, std::size_t offset, int peer, void** out) {
  *out = ncclGetLsaPointer(window, offset, peer);
}
}  // namespace

void* resolve_lsa_pointer(ncclWindow_t window, std::size_t offset, int peer, cudaStream_t stream) {
  void** d_out = nullptr;
  XSTAGE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d_out), sizeof(void*), stream));
  launch_kernel(resolve_lsa_pointer_kernel, 1, 1, 0, stream, window, offset, peer, d_out);
  void* result = nullptr;
  XSTAGE_CUDA_CHECK(cudaMemcpyAsync(&result, d_out, sizeof(void*), cudaMemcpyDeviceToHost, stream));
  XSTAGE_CUDA_CHECK(cudaFreeAsync(d_out, stream));
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace xstage::comm
