// The call counter of a fused op, in device memory and advanced by the op's own kernels, so that a call
// captured in a CUDA graph and replayed counts as a new call each time (a counter kept by the host and
// baked into the kernel's parameters would replay the same number, and the cross-rank handshakes that
// compare against it would pass at once).
//
// Call e (1, 2, ...) is the call that runs while calls_done = e - 1. Every CTA of the op's main kernel
// reads it at its start; the last CTA to finish (counted on ctas_done, which it resets) publishes
// calls_done = e. That is safe without any other synchronisation: each CTA reads calls_done before its
// own increment of ctas_done, and the last increment comes after all of them. Kernels that run before the
// main one in the same call (a prologue) read the same e, since calls_done changes only at its end.
#pragma once

#include <cstdint>

#include "comm/device_status.hpp"

#if defined(__CUDACC__)
#include "comm/device/ptx.cuh"

namespace xstage::comm {

// The call running now.
__device__ __forceinline__ std::uint32_t current_call(const CallEpochView& v) {
  return *static_cast<const volatile std::uint32_t*>(v.calls_done) + 1u;
}

// Called once per CTA (one thread) after everything it does in the call; true on the last CTA of the grid,
// which has then published the call as done. The count is an acq_rel add: a release of the CTA's earlier operations
// (its read of calls_done among them, and through the CTA barrier before it, the CTA's writes), and on the last CTA
// an acquire of every other CTA's. Whoever reads calls_done next is a later kernel, ordered by the kernel boundary.
__device__ __forceinline__ bool finish_cta(const CallEpochView& v, std::uint32_t epoch, unsigned ctas) {
  if (atom_acq_rel_gpu_add(v.ctas_done, 1u) != ctas - 1u) return false;
  *static_cast<volatile std::uint32_t*>(v.ctas_done) = 0u;
  *static_cast<volatile std::uint32_t*>(v.calls_done) = epoch;
  return true;
}

}  // namespace xstage::comm
#endif  // __CUDACC__
