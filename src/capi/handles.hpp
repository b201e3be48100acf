// The C ABI's opaque handles (xstage_c.h declares them as incomplete struct types): what each owns.
// Shared by comm.cpp, ulysses.cpp and moe.cpp; not part of the ABI.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "attention/ulysses/layer.hpp"
#include "capi/capi_internal.hpp"
#include "comm/runtime.hpp"
#include "common/cuda_check.hpp"
#include "moe/megamoe.hpp"
#include "moe/problem/problem.hpp"

// A communicator: the NCCL runtime of this rank, and how many layers built on it are alive (it must outlive
// them: each holds a reference to the runtime and symmetric windows registered with its communicator).
struct xstage_comm {
  std::unique_ptr<xstage::comm::Runtime> runtime;
  int layers = 0;
};

struct xstage_ulysses {
  xstage_comm* comm = nullptr;
  xstage::attention::UlyssesShape shape;
  std::unique_ptr<xstage::attention::UlyssesAttention> layer;
};

struct xstage_moe {
  xstage_comm* comm = nullptr;
  xstage::moe::MoeProblem problem;
  std::unique_ptr<xstage::moe::FusedMoeLayer> layer;
};

namespace xstage::capi {

// Throws InputError unless `comm` is non-null and alive.
comm::Runtime& require_comm(const xstage_comm* comm);

// Destroys a layer handle (xstage_ulysses or xstage_moe): waits for the device to finish with its buffers,
// frees them (collective: the symmetric windows are deregistered), releases its hold on the communicator.
// A failed synchronisation (a sticky CUDA error: the context is lost anyway) still frees everything and is
// reported afterwards, so that the communicator can be destroyed.
template <class Handle>
void destroy_layer(Handle* handle) {
  if (handle == nullptr) return;
  cudaError_t sync = cudaSuccess;
  if (handle->layer) {
    DeviceGuard guard(require_comm(handle->comm).device());
    sync = cudaDeviceSynchronize();
    handle->layer.reset();
    --handle->comm->layers;
  }
  delete handle;
  XSTAGE_CUDA_CHECK(sync);
}

}  // namespace xstage::capi
