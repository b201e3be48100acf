// Device-side plumbing of the MegaMoE kernel: scoped loads/stores/adds on the readiness counters, the
// proxy fence between generic stores and TMA loads, and bounded waits that report what they waited for.
//
// No device-side wait in xstage is unbounded. A counter wait that passes its deadline records which
// counter, its value and the target in host-mapped memory (MoeDeviceStatus) and returns false; from then
// on every wait of the kernel returns at once, the kernel winds down on whatever its buffers hold (every
// address it computes stays in bounds: a failure before the routing is known skips all tiles), and the
// host reports the record. No trap: the CUDA context stays usable, so the caller can report, tear down
// collectively and go on.
#pragma once

#include <cstdint>

#include "common/device_clock.cuh"
#include "moe/megamoe_status.hpp"

namespace xstage::moe {

// Per-call totals over all CTAs (device memory, zeroed per call), cycles from clock64: where the time goes.
struct MoeKernelStats {
  unsigned long long peer_bytes;            // bytes pulled from (dispatch) and stored to (combine) other ranks
  unsigned long long consumer_cycles;       // consumer warpgroup 0: start of its first tile to end of its last
  unsigned long long staging_wait_cycles;   // ... of which waiting for a free staging slot: the combine stores'
                                            // back-pressure on the tensor cores
  unsigned long long storer_drain_cycles;   // storer in fence.sc.sys after each tile: its stores completing (T_RS)
  unsigned long long producer_wait_cycles;  // producer waiting on dispatch_ready / l1_done / l2_done
  unsigned long long tail_cycles;           // roles done -> reduction done (other ranks' combine + the reduction)
  unsigned long long l1_tiles, l2_tiles;
  // K_act, measured: CTAs whose storers are draining an L2 tile (staging read -> stores complete) at the
  // moment another starts one, itself included; summed over L2 tiles, and the most seen.
  unsigned long long draining_now;          // live count during the kernel
  unsigned long long burst_overlap_sum;
  unsigned long long burst_overlap_max;
  // %globaltimer (ns, one clock for all SMs): the earliest CTA entry and first tile start are kept as their
  // bitwise complements under atomicMax (the record starts zeroed), the last tile end and kernel end as is.
  unsigned long long kernel_start_not_ns, first_tile_not_ns, last_tile_end_ns, kernel_end_ns;
  // %globaltimer per CTA (consumer warpgroup 0): first tile start to last tile end, summed over CTAs (the
  // clock64 total above converted at the SM clock measured afterwards is only as good as that clock), and the
  // earliest CTA's last tile end (complemented, as above): how unevenly the CTAs finish.
  unsigned long long consumer_ns, first_cta_done_not_ns;
};

// Everything a bounded wait needs to report a timeout.
struct WaitContext {
  MoeDeviceStatus* status;       // host-mapped: what failed, for the host
  std::uint32_t* aborted;        // device memory, zeroed per call: set with the record, polled by every wait
  std::uint64_t timeout_ns;
  int rank;
  std::uint32_t epoch;
};

#if defined(__CUDACC__)

__device__ __forceinline__ std::uint32_t ld_acquire_gpu(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ std::uint32_t ld_acquire_sys(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int ld_relaxed_sys(const int* p) {
  int v;
  asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu_add(std::uint32_t* p, std::uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_sys_add(std::uint32_t* p, std::uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(std::uint32_t* p, std::uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// A 16-byte store under a predicate, in one instruction: a plain `if` around stores in a fully unrolled loop
// lets the compiler duplicate the whole loop for a loop-invariant condition (the storers' 128 stores per
// tile), which doubled their code for the rare half-full Linear-2 block.
__device__ __forceinline__ void st_global_v4_if(void* p, uint4 v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}" ::"l"(p), "r"(v.x),
      "r"(v.y), "r"(v.z), "r"(v.w), "r"(static_cast<int>(pred))
      : "memory");
}
// Orders this thread's generic-proxy global writes before later async-proxy (TMA) accesses, and the
// reader's acquire before its TMA loads: used on both sides of every counter a TMA load waits for.
// A 32-bit value in the shared memory of CTA `rank` of this cluster (distributed shared memory).
__device__ __forceinline__ int ld_shared_cluster(const int* p, unsigned rank) {
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote = 0;
  int v = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  return v;
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// Records a failure (the first one wins) and raises the kernel's abort flag.
__device__ __noinline__ void moe_device_fail(const WaitContext& ctx, MoeWait what, int index, std::uint32_t value,
                                             std::uint32_t target) {
  atomicExch(ctx.aborted, 1u);
  MoeDeviceStatus* status = ctx.status;
  const int rank = ctx.rank;
  const std::uint32_t epoch = ctx.epoch;
  if (atomicCAS_system(&status->failed, 0u, 1u) == 0u) {
    volatile MoeDeviceStatus* s = status;
    s->what = static_cast<std::int32_t>(what);
    s->rank = rank;
    s->cta = static_cast<std::int32_t>(blockIdx.x);
    s->index = index;
    s->value = value;
    s->target = target;
    s->epoch = epoch;
    __threadfence_system();
  }
}

// Polled by spinning waits: device memory (the host-mapped record would put a PCIe read in every spin).
__device__ __forceinline__ bool moe_aborted(const WaitContext& ctx) {
  return *static_cast<const volatile std::uint32_t*>(ctx.aborted) != 0u;
}

// Spins until *counter - target >= 0 (wrap-safe), with acquire at GPU (kSystem = false) or system scope.
// Returns false, having recorded why, when the deadline passes, and at once when another wait of this
// kernel has already failed (checked every 64 spins: the record is in host memory).
template <bool kSystem>
__device__ __forceinline__ bool wait_counter(const WaitContext& ctx, const std::uint32_t* counter, std::uint32_t target,
                                             MoeWait what, int index) {
  auto load = [&] { return kSystem ? ld_acquire_sys(counter) : ld_acquire_gpu(counter); };
  std::uint32_t v = load();
  if (static_cast<std::int32_t>(v - target) >= 0) return true;
  const std::uint64_t deadline = global_timer_ns() + ctx.timeout_ns;
  for (std::uint32_t spins = 0;; ++spins) {
    v = load();
    if (static_cast<std::int32_t>(v - target) >= 0) return true;
    if ((spins & 63u) == 63u) {
      if (moe_aborted(ctx)) return false;
      if (global_timer_ns() > deadline) {
        moe_device_fail(ctx, what, index, v, target);
        return false;
      }
    }
  }
}

#endif  // __CUDACC__

}  // namespace xstage::moe
