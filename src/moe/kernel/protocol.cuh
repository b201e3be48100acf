// The MegaMoE kernel's view of the cross-rank protocol (src/comm/device): the scoped memory operations, the
// bounded waits with MoeWait naming what they wait for, and the statistics policy (kernel/stats.hpp) as
// helpers that compile to nothing in the default build.
#pragma once

#include <cstdint>

#include "comm/device/bounded_pipeline.cuh"
#include "comm/device/bounded_wait.cuh"
#include "comm/device/call_epoch.cuh"
#include "comm/device/ptx.cuh"
#include "common/device_clock.cuh"
#include "moe/kernel/stats.hpp"
#include "moe/kernel/status.hpp"

namespace xstage::moe {

using comm::fence_acq_rel_gpu;
using comm::fence_acq_rel_sys;
using comm::fence_proxy_async_global;
using comm::ld_relaxed_sys;
using comm::ld_shared_cluster;
using comm::red_release_gpu_add;
using comm::red_relaxed_gpu_add;
using comm::red_relaxed_sys_add;
using comm::st_global_v4_if;
using comm::st_release_sys;

template <bool kSystem>
__device__ __forceinline__ bool wait_counter(const comm::WaitContext& ctx, const std::uint32_t* counter, std::uint32_t target,
                                             MoeWait what, int index) {
  return comm::wait_counter<kSystem>(ctx, counter, target, static_cast<int>(what), index);
}
__device__ __forceinline__ bool wait_mbarrier(const comm::WaitContext& ctx, const std::uint64_t* bar, std::uint32_t phase,
                                              MoeWait what, int index) {
  return comm::wait_mbarrier(ctx, bar, phase, static_cast<int>(what), index);
}
__device__ __forceinline__ void moe_device_fail(const comm::WaitContext& ctx, MoeWait what, int index, std::uint32_t value,
                                                std::uint32_t target) {
  comm::device_fail(ctx, static_cast<int>(what), index, value, target);
}

// Statistics (kMoeStats): a clock read, and an atomic add into the per-call record; nothing when off.
__device__ __forceinline__ long long stats_clock() {
  if constexpr (kMoeStats) return clock64();
  else return 0;
}
// ... once `v` has arrived: the clock read is predicated on a compare of v, so it cannot issue before v's load
// returns (a plain clock read after a load only says the load was issued).
__device__ __forceinline__ long long stats_clock_after(int v) {
  if constexpr (kMoeStats) {
    long long t;
    asm volatile("{\n .reg .pred p;\n setp.ne.s32 p, %1, 0x7fffffff;\n mov.u64 %0, 0;\n @p mov.u64 %0, %%clock64;\n}"
                 : "=l"(t) : "r"(v) : "memory");
    return t;
  } else {
    return 0;
  }
}
__device__ __forceinline__ void stats_add(unsigned long long* field, unsigned long long v) {
  if constexpr (kMoeStats) atomicAdd(field, v);
}
__device__ __forceinline__ void stats_max(unsigned long long* field, unsigned long long v) {
  if constexpr (kMoeStats) atomicMax(field, v);
}

}  // namespace xstage::moe
