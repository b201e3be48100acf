// The two ways a fused epilogue moves a finished tile from shared memory into a peer's memory, and the
// signal that tells the peer it has landed (docs/CALIBRATION.md compares the two paths' X-Stage):
//   st.global   16-byte stores from registers, one per thread and piece: the issuing warps stall when
//               the stage back-pressures (the calibration's `st_global_16B` producer);
//   TMA bulk    cp.async.bulk from shared memory, issued by one thread: the warps go on at once, and the
//               staging buffer stays busy until the data is written at the peer (`tma_bulk`).
// Arrival: after its stores, a writer adds what it delivered to a counter in the receiver's window with a
// release at system scope (signal_arrivals); the receiver waits for the total with wait_counter<true>.
#pragma once

#include <cstdint>

#include "comm/device/ptx.cuh"

#if defined(__CUDACC__)
namespace xstage::comm {

// Until every committed group's writes are complete (for a peer: written at the peer).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Adds counts[j] to counters[j] for every j < n whose count is not 0, counters that may live on peers, as one
// release at system scope: the bulk stores ordered for the generic proxy, a fence.acq_rel.sys, then relaxed adds (each
// a release pattern with the fence). Every store that precedes it (this thread's, the bulk stores it has waited for
// with bulk_wait_all, and the CTA's before a barrier it passed) is visible to whoever acquires a count. One system
// fence for all n counters: red.release per counter would wait for the previous add at each.
__device__ __forceinline__ void signal_arrivals(std::uint32_t* const* counters, const std::uint32_t* counts, int n) {
  fence_proxy_async_global();
  fence_acq_rel_sys();
  for (int j = 0; j < n; ++j)
    if (counts[j] != 0) red_relaxed_sys_add(counters[j], counts[j]);
}

}  // namespace xstage::comm
#endif  // __CUDACC__
