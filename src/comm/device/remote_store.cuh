// The two ways a fused epilogue moves a finished tile from shared memory into a peer's memory, and the
// signal that tells the peer it has landed (docs/CALIBRATION.md compares the two paths' X-Stage):
//   st.global   16-byte stores from registers, one per thread and piece: the issuing warps stall when
//               the stage back-pressures (the calibration's `st_global_16B` producer);
//   TMA bulk    cp.async.bulk from shared memory, issued by one thread: the warps go on at once, and the
//               staging buffer stays busy until the data is written at the peer (`tma_bulk`).
// Arrival: after its stores, a writer adds what it delivered to a counter in the receiver's window with a
// release at system scope (red.release.sys); the receiver waits for the total with wait_counter<true>.
#pragma once

#include <cstdint>

#include "comm/device/ptx.cuh"

#if defined(__CUDACC__)
namespace xstage::comm {

// Until every committed group's writes are complete (for a peer: written at the peer).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Adds `n` to a counter that may live on a peer, with release semantics at system scope: every store that precedes
// it (this thread's, and the CTA's before a barrier it passed) is visible to whoever acquires the count. Bulk stores
// must have completed (bulk_wait_all) and been ordered for the generic proxy (fence_proxy_async_global) first.
__device__ __forceinline__ void signal_arrival(std::uint32_t* counter, std::uint32_t n) { red_release_sys_add(counter, n); }

}  // namespace xstage::comm
#endif  // __CUDACC__
