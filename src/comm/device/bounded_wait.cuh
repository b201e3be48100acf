// Bounded device-side waits (comm/device_status.hpp has the rule and the record they fill).
//
// Two kinds of wait, one deadline discipline: a counter in global memory written by other SMs or other
// GPUs (wait_counter), an mbarrier phase in shared memory (wait_mbarrier; the CUTLASS pipelines' waits are
// in comm/device/bounded_pipeline.cuh). Each first tries once (the fast path, the only code on a kernel's hot path), then spins
// checking the op's abort flag and %globaltimer every few tries. Everything is inlined on purpose: a call
// instruction between a wgmma batch and its wait makes ptxas serialise the wgmma pipeline (warning C7510).
//
// What is not a wait here, and why it still cannot hang: named barriers (bar.sync) and cluster barriers
// (barrier.cluster) join the threads of one CTA or one cluster, and every path to them is made of these
// bounded waits, so they are reached within the waits' bounds.
#pragma once

#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "common/device_clock.cuh"
#include "comm/device/ptx.cuh"
#include "comm/device_status.hpp"

#if defined(__CUDACC__)
namespace xstage::comm {

// Records a failure (the first one of the op wins) without stopping anything: for bad input the kernels can
// step around (they drop it and go on, so that the peers' calls complete), reported by the host's poll().
__device__ __forceinline__ void device_record(const WaitContext& ctx, int what, int index, std::uint32_t value,
                                              std::uint32_t target) {
  DeviceStatus* status = ctx.status;
  if (atomicCAS_system(&status->claimed, 0u, 1u) == 0u) {
    volatile DeviceStatus* s = status;
    s->what = what;
    s->rank = ctx.rank;
    s->cta = static_cast<std::int32_t>(blockIdx.x);
    s->index = index;
    s->value = value;
    s->target = target;
    s->epoch = *static_cast<const volatile std::uint32_t*>(ctx.calls_done) + 1;  // the running call
    __threadfence_system();
    s->failed = 1u;
    __threadfence_system();
  }
}

// Records a failure and raises the op's abort flag: every wait of the op gives up from now on.
__device__ __forceinline__ void device_fail(const WaitContext& ctx, int what, int index, std::uint32_t value,
                                            std::uint32_t target) {
  atomicExch(ctx.aborted, 1u);
  device_record(ctx, what, index, value, target);
}

// Polled by spinning waits: device memory (the host-mapped record would put a PCIe read in every spin).
__device__ __forceinline__ bool op_aborted(const WaitContext& ctx) {
  return *static_cast<const volatile std::uint32_t*>(ctx.aborted) != 0u;
}

// Spins until *counter - target >= 0 (wrap-safe), with acquire at GPU (kSystem = false) or system scope.
// Returns false, having recorded why, when the deadline passes, and at once when another wait of this op
// has already failed (checked every 64 spins).
template <bool kSystem>
__device__ __forceinline__ bool wait_counter(const WaitContext& ctx, const std::uint32_t* counter, std::uint32_t target,
                                             int what, int index) {
  auto load = [&] { return kSystem ? ld_acquire_sys(counter) : ld_acquire_gpu(counter); };
  std::uint32_t v = load();
  if (static_cast<std::int32_t>(v - target) >= 0) return true;
  const std::uint64_t deadline = global_timer_ns() + ctx.timeout_ns;
  for (std::uint32_t spins = 0;; ++spins) {
    v = load();
    if (static_cast<std::int32_t>(v - target) >= 0) return true;
    if ((spins & 63u) == 63u) {
      if (op_aborted(ctx)) return false;
      if (global_timer_ns() > deadline) {
        device_fail(ctx, what, index, v, target);
        return false;
      }
    }
  }
}

// Waits for phase `phase` of the mbarrier at `bar` to complete. try_wait suspends the thread in hardware for
// a while before it gives up, so the abort flag and the clock are read every 8 tries only.
__device__ __forceinline__ bool wait_mbarrier(const WaitContext& ctx, const std::uint64_t* bar, std::uint32_t phase,
                                              int what, int index) {
  if (cutlass::arch::ClusterBarrier::try_wait(bar, phase)) return true;
  const std::uint64_t deadline = global_timer_ns() + ctx.timeout_ns;
  for (std::uint32_t tries = 0;; ++tries) {
    if (cutlass::arch::ClusterBarrier::try_wait(bar, phase)) return true;
    if ((tries & 7u) == 7u) {
      if (op_aborted(ctx)) return false;
      if (global_timer_ns() > deadline) {
        device_fail(ctx, what, index, 0u, phase);
        return false;
      }
    }
  }
}

}  // namespace xstage::comm
#endif  // __CUDACC__
