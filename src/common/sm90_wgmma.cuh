// wgmma helpers shared by the Hopper kernels (attention, MoE).
#pragma once

#include <cute/tensor.hpp>

namespace xstage {

// One wgmma batch: C (+)= A B over the K modes of the fragments, committed as one group.
// kWait >= 0 waits until at most kWait groups are still in flight. kARegisters: A is a register
// fragment (RS wgmma), fenced so the compiler keeps it intact while the wgmma reads it.
template <bool kZeroInit, int kWait, bool kARegisters, class TiledMma, class FragA, class FragB, class FragC>
CUTE_DEVICE void wgmma_batch(TiledMma& tiled_mma, FragA& frag_a, FragB const& frag_b, FragC& frag_c) {
  using namespace cute;
  warpgroup_fence_operand(frag_c);
  if constexpr (kARegisters) warpgroup_fence_operand(frag_a);
  warpgroup_arrive();
  tiled_mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(frag_a); ++k) {
    cute::gemm(tiled_mma, frag_a(_, _, k), frag_b(_, _, k), frag_c);
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(frag_c);
  if constexpr (kARegisters) warpgroup_fence_operand(frag_a);
}

}  // namespace xstage
