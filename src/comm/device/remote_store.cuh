// The two ways a fused epilogue moves a finished tile from shared memory into a peer's memory, and the
// signal that tells the peer it has landed (docs/CALIBRATION.md compares the two paths' X-Stage):
//   st.global   16-byte stores from registers, one per thread and piece: the issuing warps stall when
//               the stage back-pressures (the calibration's `st_global_16B` producer);
//   TMA bulk    cp.async.bulk from shared memory, issued by one thread: the warps go on at once, and the
//               staging buffer stays busy until the data is written at the peer (`tma_bulk`).
// Arrival: after its stores, a writer fences at system scope and adds what it delivered to a counter in
// the receiver's window (red.release.sys); the receiver waits for the total with wait_counter<true>.
#pragma once

#include <cstdint>

#include "comm/device/ptx.cuh"

#if defined(__CUDACC__)
namespace xstage::comm {

// Until every committed group's writes are complete (for a peer: written at the peer).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Makes this thread's earlier stores (generic, and bulk stores it has waited for) visible at system scope,
// then adds `n` to a counter that may live on a peer.
__device__ __forceinline__ void signal_arrival(std::uint32_t* counter, std::uint32_t n) {
  fence_proxy_async_global();
  __threadfence_system();
  red_release_sys_add(counter, n);
}

}  // namespace xstage::comm
#endif  // __CUDACC__
