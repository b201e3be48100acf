// A bounded cross-rank barrier over LSA (NVLink load/store) signals, usable from inside any kernel.
// NCCL's ncclLsaBarrierSession waits without limit; xstage's rule is that device-side waits are
// bounded and report a timeout (comm/device_status.hpp), so this barrier records which peer never
// arrived instead of hanging.
#pragma once

#include <cstdint>

#include "comm/device_status.hpp"
#if defined(__CUDACC__)
#include "comm/device/bounded_wait.cuh"
#endif

namespace xstage::comm {

constexpr int kMaxLsaRanks = 72;  // an NVL72 rack
constexpr int kSignalBarrierPeer = 1;  // DeviceStatus::what of a barrier wait: index = the missing peer

struct SignalBarrierView {
  std::uint32_t* local_flags;                 // flags[src]: last epoch signalled by rank src
  std::uint32_t* peer_flags[kMaxLsaRanks];    // peer p's flags array (LSA pointers)
  WaitContext wait;
  int rank;
  int world;

#if defined(__CUDACC__)
  // Call from ONE thread, after the writes this barrier must publish (e.g. after __syncthreads in the
  // writing CTA, or at the start of a later kernel). Release at system scope publishes them to peers. A timeout
  // is recorded as `what` (the op's own code for this barrier) with the missing peer as the index.
  __device__ bool arrive_and_wait(std::uint32_t epoch, int what = kSignalBarrierPeer) const {
    __threadfence_system();
    for (int p = 0; p < world; ++p)
      if (p != rank) st_release_sys(peer_flags[p] + rank, epoch);
    bool ok = true;
    for (int p = 0; p < world && ok; ++p)
      if (p != rank) ok = wait_counter<true>(wait, local_flags + p, epoch, what, p);
    return ok;
  }
#endif
};

}  // namespace xstage::comm
