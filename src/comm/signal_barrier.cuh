// A bounded cross-rank barrier over LSA (NVLink load/store) signals, usable from inside any kernel.
// NCCL's ncclLsaBarrierSession waits without limit; xstage's rule is that device-side waits are
// bounded and report a timeout, so this barrier records which peer never arrived instead of hanging.
#pragma once

#include <cstdint>

#include "common/device_clock.cuh"

namespace xstage::comm {

constexpr int kMaxLsaRanks = 72;  // an NVL72 rack

struct DeviceWaitError {
  std::uint32_t timed_out;     // 0 = fine
  std::int32_t missing_peer;   // the peer whose signal never came
  std::uint32_t epoch;         // the epoch that was awaited
};


struct SignalBarrierView {
  std::uint32_t* local_flags;                 // flags[src]: last epoch signalled by rank src
  std::uint32_t* peer_flags[kMaxLsaRanks];    // peer p's flags array (LSA pointers)
  DeviceWaitError* error;
  int rank;
  int world;

#if defined(__CUDACC__)
  // Call from ONE thread, after the writes this barrier must publish (e.g. after __syncthreads in the
  // writing CTA, or at the start of a later kernel). Release at system scope publishes them to peers.
  __device__ bool arrive_and_wait(std::uint32_t epoch, std::uint64_t timeout_ns) const {
    __threadfence_system();
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(peer_flags[p] + rank), "r"(epoch) : "memory");
    }
    const std::uint64_t deadline = global_timer_ns() + timeout_ns;
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      while (true) {
        std::uint32_t seen;
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(local_flags + p) : "memory");
        if (static_cast<std::int32_t>(seen - epoch) >= 0) break;
        if (global_timer_ns() > deadline) {
          error->missing_peer = p;
          error->epoch = epoch;
          atomicExch(&error->timed_out, 1u);
          return false;
        }
      }
    }
    return true;
  }
#endif
};

}  // namespace xstage::comm
