// The kernel's tail, run by every thread after its role: wait until every owner has stored every valid row
// of this rank's tokens (combine_arrived), then this thread's share of the top-k weighted sum.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "common/bf16x8.cuh"
#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"

namespace xstage::moe {

// out[t] = Σ_j w[t][j] · combine[t][j] (fp32, j in order). One 16-byte column chunk of one token per thread,
// the grid's threads striding over all (token, chunk) pairs, so every thread has work and neighbouring
// threads read neighbouring bytes; kRowsInFlight of the token's k rows are loaded before any is summed (a
// bandwidth pass over T·k·h·2 bytes: it needs many loads in flight). The sum order is j = 0, 1, ... whatever
// kRowsInFlight is, so every thread's result is the same.
template <int kRowsInFlight, class C>
__device__ void reduce_role(const MegaMoeParams<C>& prm) {
  const MoeProblem& pr = prm.problem;
  const int k = pr.top_k, chunks = pr.h_hidden / 8;
  const std::int64_t items = static_cast<std::int64_t>(prm.tokens) * chunks;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += stride) {
    const int t = static_cast<int>(i / chunks), c = static_cast<int>(i % chunks);
    float sum[8] = {};
    for (int j0 = 0; j0 < k; j0 += kRowsInFlight) {
      uint4 v[kRowsInFlight];
      float wt[kRowsInFlight];
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j)
        if (j0 + j < k) {
          v[j] = __ldcg(at<const uint4>(prm.local, prm.window.combine.row_offset(t, j0 + j)) + c);
          wt[j] = prm.topk_weights[static_cast<std::int64_t>(t) * k + j0 + j];
        }
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j)
        if (j0 + j < k) accumulate_bf16x8(sum, wt[j], v[j]);
    }
    reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(prm.out) + static_cast<std::int64_t>(t) * pr.h_hidden)[c] = pack_bf16x8(sum);
  }
}

// The pairs of this rank's routing that owners will store (the route kernel's per-expert counts): T_s·k
// unless the router gave bad ids, which the route kernel drops and reports.
template <class C>
__device__ __forceinline__ std::uint32_t routed_pairs(const MegaMoeParams<C>& prm) {
  std::uint32_t pairs = 0;
  for (int e = 0; e < prm.problem.E_experts; ++e) pairs += *at<const std::uint32_t>(prm.local, prm.window.send.count_offset(e));
  return pairs;
}

// Returns when the wait began (thread 0's tail statistic). A CTA pair first joins both CTAs: the partner's
// consumers may still be arriving on this CTA's empty barriers, so neither leaves the cluster's shared memory
// before both are done with it (bounded: every path to it is made of bounded waits, comm/device/bounded_wait.cuh).
template <int kRowsInFlight, class C>
__device__ long long await_combine_then_reduce(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem) {
  if constexpr (C::kClusterSize > 1) cute::cluster_sync();
  else cutlass::arch::NamedBarrier::sync(C::kThreads, kRolesDoneBarrier);
  const long long tail_start = stats_clock();
  if (threadIdx.x == 0 && smem.routing_ok)
    smem.routing_ok = wait_counter<true>(prm.wait, at<const std::uint32_t>(prm.local, prm.window.counters.combine_arrived()),
                                         routed_pairs(prm) * prm.problem.P2_l2_n_blocks(), MoeWait::combine_arrived, -1);
  cutlass::arch::NamedBarrier::sync(C::kThreads, kRolesDoneBarrier);
  if (smem.routing_ok) reduce_role<kRowsInFlight>(prm);  // else the output stays as it was; poll() reports it
  return tail_start;
}

}  // namespace xstage::moe
