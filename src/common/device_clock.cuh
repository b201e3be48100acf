// The two clocks every in-kernel measurement uses: the SM's cycle counter (clock64, per SM, exact but
// in cycles of a frequency that changes with DVFS) and %globaltimer (ns, shared by all SMs, coarse).
// Cycle counts are converted with a frequency measured against %globaltimer in the same launch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
namespace xstage {

__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ std::uint64_t sm_clock() { return static_cast<std::uint64_t>(clock64()); }

}  // namespace xstage
#endif
