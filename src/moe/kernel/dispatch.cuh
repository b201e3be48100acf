// The dispatch role (warp 1): pulls the token rows routed to this rank's experts from their source ranks
// over NVLink into the local expert-major dispatch buffer, all CTAs together, front to back, and raises
// dispatch_ready for each unit of rows.
#pragma once

#include <cstdint>

#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

// Pulls dispatch rows in units of kDispatchUnitRows consecutive rows of one scheduler row, unit u = g, g + Gs,
// ... in increasing order, so that all CTAs together fill scheduler rows front to back (the order the L1
// stream consumes them) instead of each CTA filling whole rows of its own. Dispatch warp `dw` takes its share
// of each unit's rows: lanes resolve the rows' sources in parallel (remote 4-byte loads), then the whole
// warp copies one row at a time, kDispatchChunks × 16 bytes in flight per lane (fp8: and the row's scales).
template <class C>
__device__ void dispatch_role(const MegaMoeParams<C>& prm, const MegaMoeSharedStorage<C>& smem, int dw) {
  const MoeProblem& pr = prm.problem;
  const SymmetricWindow& w = prm.window;
  const int lane = threadIdx.x % 32, EL = pr.E_local(), k = pr.top_k;
  constexpr int kWarpRows = kDispatchUnitRows / C::kDispatchWarps;
  const int units_per_row = pr.b_m / kDispatchUnitRows;
  const int units = smem.first_row[EL] * units_per_row;
  const int chunks = static_cast<int>(w.tokens.row_pitch_bytes / 16);  // 16-byte pieces of one token row
  const SchedulerRows rows{smem.first_row, EL};
  unsigned long long remote_bytes = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int p = u / units_per_row;
    const int e = rows.expert_of_row(p);
    const int rows_e = smem.expert_rows[e];
    const int r0 = (u % units_per_row) * kDispatchUnitRows + dw * kWarpRows;  // first row of this warp in the block
    RowSource src{};
    if (lane < kWarpRows) {
      const int i = (p - smem.first_row[e]) * pr.b_m + r0 + lane;  // row inside the expert
      if (i < rows_e) {
        int s = 0, before = 0;
        while (i >= before + smem.counts[s * EL + e]) before += smem.counts[s * EL + e], ++s;
        const int pair = ld_relaxed_sys(at<const int>(prm.peer[s], w.send.pair_offset(pr.global_expert(prm.rank, e), i - before)));
        if (pair >= 0 && pair < pr.T_tokens * pr.top_k) {
          src.rank = s;
          src.pair = pair;
        } else {  // a corrupt list must not send the copy out of bounds
          moe_device_fail(prm.wait, MoeWait::corrupt_routing, s, static_cast<std::uint32_t>(pair),
                          static_cast<std::uint32_t>(pr.T_tokens * pr.top_k));
        }
      }
      *at<RowSource>(prm.local, w.dispatch.row_source_offset(static_cast<std::int64_t>(p) * pr.b_m + r0 + lane)) = src;
    }
    for (int q = 0; q < kWarpRows; ++q) {
      const int s = __shfl_sync(0xffffffffu, src.rank, q);
      const int pair = __shfl_sync(0xffffffffu, src.pair, q);
      if (pair < 0) continue;  // padding row: only its RowSource is written
      const uint4* from = at<const uint4>(prm.peer[s], w.tokens.token_offset(pair / k));
      uint4* to = at<uint4>(prm.local, w.dispatch.row_offset(static_cast<std::int64_t>(p) * pr.b_m + r0 + q));
      for (int c0 = 0; c0 < chunks; c0 += 32 * C::kDispatchChunks) {
        uint4 v[C::kDispatchChunks];
#pragma unroll
        for (int x = 0; x < C::kDispatchChunks; ++x) {
          const int c = c0 + 32 * x + lane;
          if (c < chunks) v[x] = from[c];
        }
#pragma unroll
        for (int x = 0; x < C::kDispatchChunks; ++x) {
          const int c = c0 + 32 * x + lane;
          if (c < chunks) to[c] = v[x];
        }
      }
      if constexpr (C::kFp8) {  // the row's 1×128 scales, into the owner's MN-major [K block][row] table
        const float* from_scale = at<const float>(prm.peer[s], w.tokens.scale_offset(pair / k, 0));
        const std::int64_t row = static_cast<std::int64_t>(p) * pr.b_m + r0 + q;
        for (int kb = lane; kb < w.tokens.scale_blocks; kb += 32)
          *at<float>(prm.local, w.dispatch.scale_offset(row, kb)) = from_scale[kb];
      }
      if (s != prm.rank) remote_bytes += static_cast<unsigned long long>(w.tokens.row_pitch_bytes) + 4ull * w.tokens.scale_blocks;
    }
    fence_proxy_async_global();
    __threadfence();
    __syncwarp();
    if (lane == 0) red_release_gpu_add(at<std::uint32_t>(prm.local, w.counters.dispatch_ready(p)), kWarpRows);
  }
  if (lane == 0 && remote_bytes) stats_add(&prm.stats->peer_bytes, remote_bytes);
}


}  // namespace xstage::moe
