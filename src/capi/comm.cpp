// xstage_comm_*: the communicator handle over comm::Runtime, adopting a job that a framework has set up
// (torch.distributed distributes the NCCL unique id; this process is one rank on one GPU).
#include <nccl.h>

#include <cstring>
#include <string>

#include "capi/capi_internal.hpp"
#include "capi/handles.hpp"
#include "capi/xstage_c.h"
#include "common/cuda_check.hpp"
#include "common/error.hpp"

static_assert(sizeof(ncclUniqueId) == XSTAGE_COMM_UNIQUE_ID_BYTES, "XSTAGE_COMM_UNIQUE_ID_BYTES is sizeof(ncclUniqueId)");

namespace xstage::capi {

comm::Runtime& require_comm(const xstage_comm* comm) {
  XSTAGE_REQUIRE(comm != nullptr && comm->runtime != nullptr, "comm is NULL (create it with xstage_comm_create)");
  return *comm->runtime;
}

}  // namespace xstage::capi

using xstage::InputError;
namespace capi = xstage::capi;

extern "C" {

XSTAGE_C_API int xstage_comm_unique_id(uint8_t out[XSTAGE_COMM_UNIQUE_ID_BYTES]) {
  return capi::guarded("xstage_comm_unique_id", [&] {
    XSTAGE_REQUIRE(out != nullptr, "out is NULL");
    const ncclUniqueId id = xstage::comm::Runtime::new_unique_id();
    std::memcpy(out, &id, sizeof id);
  });
}

XSTAGE_C_API int xstage_comm_create(const uint8_t id[XSTAGE_COMM_UNIQUE_ID_BYTES], int32_t rank, int32_t world_size,
                                    int32_t device, xstage_comm** out) {
  return capi::guarded("xstage_comm_create", [&] {
    XSTAGE_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    XSTAGE_REQUIRE(id != nullptr, "id is NULL (make one with xstage_comm_unique_id on one rank)");
    XSTAGE_REQUIRE(world_size >= 1, "world_size is " + std::to_string(world_size) + "; it must be >= 1");
    XSTAGE_REQUIRE(rank >= 0 && rank < world_size,
                   "rank " + std::to_string(rank) + " does not exist in a job of " + std::to_string(world_size) + " ranks");
    XSTAGE_REQUIRE(device >= 0, "device is " + std::to_string(device) + "; it must be a CUDA device ordinal");
    xstage::require_sm90(device);
    capi::DeviceGuard guard(device);  // Runtime makes the device current; the caller's is restored after
    ncclUniqueId nccl_id;
    std::memcpy(&nccl_id, id, sizeof nccl_id);
    auto handle = std::make_unique<xstage_comm>();
    handle->runtime = std::make_unique<xstage::comm::Runtime>(nccl_id, rank, world_size, device);
    *out = handle.release();
  });
}

XSTAGE_C_API int xstage_comm_info(const xstage_comm* comm, int32_t* rank, int32_t* world_size, int32_t* device,
                                  int32_t* lsa_size) {
  return capi::guarded("xstage_comm_info", [&] {
    const xstage::comm::Runtime& rt = capi::require_comm(comm);
    if (rank) *rank = rt.rank();
    if (world_size) *world_size = rt.world_size();
    if (device) *device = rt.device();
    if (lsa_size) *lsa_size = rt.lsa_size();
  });
}

XSTAGE_C_API int xstage_comm_barrier(xstage_comm* comm) {
  return capi::guarded("xstage_comm_barrier", [&] {
    xstage::comm::Runtime& rt = capi::require_comm(comm);
    capi::DeviceGuard guard(rt.device());
    rt.barrier();
  });
}

XSTAGE_C_API int xstage_comm_destroy(xstage_comm* comm) {
  return capi::guarded("xstage_comm_destroy", [&] {
    if (comm == nullptr) return;
    XSTAGE_REQUIRE(comm->layers == 0, std::to_string(comm->layers) +
                                          " layer(s) created on this communicator still exist: destroy them first "
                                          "(xstage_ulysses_destroy / xstage_moe_destroy)");
    if (comm->runtime) {
      capi::DeviceGuard guard(comm->runtime->device());
      comm->runtime.reset();  // synchronises its stream, finalises and destroys the NCCL communicator
    }
    delete comm;
  });
}

}  // extern "C"
