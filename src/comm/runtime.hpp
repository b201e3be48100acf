// The multi-GPU runtime on NCCL 2.28: one process per GPU, a communicator, symmetric windows whose
// peer copies are directly load/store-addressable (LSA) over NVLink, and the device communicator.
// Every resource is RAII; every failure says what was wrong (no GPU, too few GPUs, no peer access,
// peers not in one NVLink domain).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/launcher.hpp"

namespace xstage::comm {

// Number of visible CUDA GPUs; throws PlatformError with a clear message if there are none.
int visible_gpu_count();

// Fails with PlatformError unless `gpus` GPUs are visible and each can load/store the others' memory.
void require_peer_access(int gpus);

class Runtime {
 public:
  // Selects GPU LOCAL_RANK, checks peer access, rendezvouses the NCCL id and creates the communicator.
  explicit Runtime(const RankEnv& env);
  // Adopts a job set up elsewhere: a framework (torch.distributed under torchrun) has distributed `id`
  // (from new_unique_id() on one rank) to every rank; this rank is `rank` of `world_size` on GPU `device`.
  Runtime(const ncclUniqueId& id, int rank, int world_size, int device);
  static ncclUniqueId new_unique_id();
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int device() const { return device_; }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  // Ranks reachable by plain loads/stores (one NVLink domain): the LSA team.
  int lsa_size() const { return lsa_size_; }

  // All ranks reach this point; stream-ordered, so kernels launched after it start nearly together.
  void barrier();
  // Every rank contributes `size` bytes; returns world_size * size bytes, rank-major.
  std::vector<std::byte> all_gather_bytes(const void* data, std::size_t size);

 private:
  void init_communicator(const ncclUniqueId& id);

  RankEnv env_;
  int device_ = 0;
  int lsa_size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // device scratch for barrier() / all_gather_bytes()
  std::size_t scratch_bytes_ = 0;
};

// A symmetric buffer: ncclMemAlloc'd on every rank and registered as one NCCL window, so that
// ncclGetLsaPointer(window, offset, peer) addresses the peer's copy from a kernel.
class SymmetricBuffer {
 public:
  SymmetricBuffer(Runtime& rt, std::size_t bytes);
  ~SymmetricBuffer();
  SymmetricBuffer(const SymmetricBuffer&) = delete;
  SymmetricBuffer& operator=(const SymmetricBuffer&) = delete;

  void* local() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  ncclWindow_t window() const { return window_; }
  // Device pointer (valid in this process) to `peer`'s copy at `offset`, through the LSA mapping.
  void* peer_pointer(int peer, std::size_t offset = 0) const;

 private:
  Runtime& rt_;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  ncclWindow_t window_ = nullptr;
};

// The device communicator (ncclDevComm) for kernels that use NCCL's device API directly.
class DeviceComm {
 public:
  DeviceComm(Runtime& rt, int lsa_barrier_count);
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;
  const ncclDevComm& get() const { return dev_comm_; }

 private:
  Runtime& rt_;
  ncclDevComm dev_comm_{};
};

// Resolves `peer`'s LSA address of `window` at `offset` (runs a one-thread kernel; host-side NCCL 2.28
// has no such query).
void* resolve_lsa_pointer(ncclWindow_t window, std::size_t offset, int peer, cudaStream_t stream);

}  // namespace xstage::comm
