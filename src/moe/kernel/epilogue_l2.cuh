// The Linear-2 epilogue: wait (bounded) for a free staging slot — where the combine stores' back-pressure
// reaches the tensor cores (the analog of Blackwell's tmem_empty on Hopper, whose accumulators live in
// registers) — write the tile into it as bf16 and hand it to the storers (storer.cuh).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"

namespace xstage::moe {

// `j`: this CTA's Linear-2 tiles before this one (staging slot j mod slots, its phase). Returns the cycles
// spent waiting for the slot (0 unless kMoeStats).
template <class C, class Acc, class Coords>
__device__ __forceinline__ unsigned long long l2_epilogue(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem, const Acc& acc,
                                                          const Coords& tCcC, int j) {
  using namespace cute;
  constexpr int kAcc = decltype(size(acc))::value;
  const int slot = j % C::kStagingSlots, phase = (j / C::kStagingSlots) & 1;
  const long long t0 = stats_clock();
  wait_mbarrier(prm.wait, &smem.staging_empty[slot], phase ^ 1, MoeWait::staging_empty, slot);
  const unsigned long long waited = static_cast<unsigned long long>(stats_clock() - t0);
  __nv_bfloat16* staged = smem.staging[slot];
#pragma unroll
  for (int v = 0; v < kAcc; v += 2) {
    const int r = get<0>(tCcC(v)), c = get<1>(tCcC(v));
    *reinterpret_cast<__nv_bfloat162*>(staged + r * C::kStagingPitch + c) = __floats2bfloat162_rn(acc(v), acc(v + 1));
  }
  cutlass::arch::ClusterBarrier::arrive(&smem.staging_full[slot]);
  return waited;
}

}  // namespace xstage::moe
