// The consumer role (warpgroups 1-2, 64 rows each of the 128 × b_n tile): per tile of this CTA's walk, the
// mainloop (mainloop.cuh), then the Linear-1 epilogue (SwiGLU into the ring) or the Linear-2 epilogue (into
// the staging buffer the storers drain). An expert's last m-block is padded to the tile's 128 rows; the rows
// past the expert's last are computed from whatever the dispatch buffer holds there (dispatch writes no padding
// row) and nothing that reaches the output depends on them: each output row of a GEMM depends only on its own
// row of A, so padding rows of the ring give padding rows of Linear-2, which the storers skip. Hence in bf16 a
// warpgroup whose 64 rows are all padding (experts with few rows: at most 64 of an m-block's 128) skips the
// products but keeps every wait and release, and the Linear-1 epilogue stores no padding row (epilogue_l1.cuh).
#pragma once

#include <cute/tensor.hpp>

#include "moe/kernel/epilogue_l1.cuh"
#include "moe/kernel/epilogue_l2.cuh"
#include "moe/kernel/mainloop.cuh"
#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"
#include "moe/kernel/tile_walk.cuh"

namespace xstage::moe {

// Rows of this CTA's tile t that hold rows of its expert, counted from the tile's first row (row cta_row0 of the
// expert's m-block m_block): 128 or more except in the expert's last m-block, where the rest are padding.
template <class C>
__device__ __forceinline__ int expert_rows_in_tile(const MegaMoeSharedStorage<C>& smem, const MoeProblem& pr, const Tile& t, int cta_row0) {
  return smem.expert_rows[t.expert] - (t.m_block * pr.b_m + cta_row0);
}

template <class Schedule, class C>
__device__ void consumer_role(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem, typename C::Pipeline& pipeline, int tid) {
  using namespace cute;
  const MoeProblem& pr = prm.problem;
  Tensor sA = make_tensor(make_smem_ptr(smem.a.data()), typename C::SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(smem.b.data()), typename C::SmemLayoutBMma{});
  typename C::TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor tCrA = thr.partition_fragment_A(sA);  // (MMA, MMA_M, MMA_K, stages)
  Tensor tCrB = thr.partition_fragment_B(sB);  // (MMA, MMA_N, MMA_K, stages · b_n/kMmaN)
  typename C::TiledMmaTile mma_tile;
  Tensor acc = partition_fragment_C(mma_tile, Shape<Int<C::kBlockM>, Int<C::kBlockN>>{});
  Tensor tCcC = mma_tile.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kBlockN>>{}));
  constexpr int kAcc = decltype(size(acc))::value;  // 64 rows × b_n columns per warpgroup: b_n / 2 per thread
  static_assert(kAcc == C::kBlockN / 2);
  constexpr int kHalf = C::kBlockN / 2;
  // SwiGLU pairs gate column c < b_n/2 with up column c + b_n/2, which the SM90 accumulator layout puts in
  // the same thread, kAcc/2 values later. Checked once, so a layout change cannot silently break it.
  for (int v = 0; v < kAcc / 2; ++v)
    if (get<1>(tCcC(v)) >= kHalf || get<1>(tCcC(v + kAcc / 2)) != get<1>(tCcC(v)) + kHalf ||
        get<0>(tCcC(v + kAcc / 2)) != get<0>(tCcC(v)))
      moe_device_fail(prm.wait, MoeWait::accumulator_layout, v, 0, 0);
  // The Linear-1 epilogue's quad transposition takes value v of the gate half to row r0 + 8·bit 1 of v and
  // column 8·(v / 4) + 2·(tid % 4) + bit 0 of v.
  for (int v = 0; v < kAcc / 2; ++v)
    if (get<0>(tCcC(v)) != get<0>(tCcC(0)) + ((v & 2) ? 8 : 0) || get<1>(tCcC(v)) != 8 * (v >> 2) + 2 * (tid % 4) + (v & 1))
      moe_device_fail(prm.wait, MoeWait::accumulator_layout, 2 * kAcc + v, 0, 0);
  const int r0 = get<0>(tCcC(0));  // this thread's rows: r0 (value bit 1 clear) and r0 + 8 (set)
  [[maybe_unused]] auto tmp = [&] {
    if constexpr (C::kFp8) {
      // The half accumulator is the tile's first kAcc/2 values, column for column, so half h of the tile is
      // values [h·kAcc/2, (h+1)·kAcc/2) of acc; and value v's row is r0 + 8·bit 1 of v.
      Tensor t = partition_fragment_C(mma, Shape<Int<C::kBlockM>, Int<C::kMmaN>>{});
      Tensor tCcH = thr.partition_C(make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kMmaN>>{}));
      static_assert(decltype(size(t))::value == kAcc / 2);
      for (int v = 0; v < kAcc / 2; ++v)
        if (get<0>(tCcH(v)) != get<0>(tCcC(v)) || get<1>(tCcH(v)) != get<1>(tCcC(v)) ||
            get<0>(tCcC(v)) != r0 + ((v & 2) ? 8 : 0))
          moe_device_fail(prm.wait, MoeWait::accumulator_layout, kAcc + v, 0, 0);
      return t;
    } else {
      return 0;
    }
  }();

  typename C::Pipeline::PipelineState state;
  const Schedule sched = make_device_schedule<Schedule>(prm, smem.first_row);
  int j = 0, l1_tiles = 0;  // L2 tiles so far (staging slot and phase), L1 tiles so far
  long long first_start = -1, last_end = 0;
  unsigned long long staging_wait = 0, first_start_ns = 0;
  for (CtaTileWalk<Schedule, C> walk(sched, smem.n_row_last, blockIdx.x); walk.next();) {
    const Tile t = walk.tile;
    const int cta_row0 = walk.first_row();  // this CTA's rows inside the scheduler row (mixed pairs: 0 or 128)
    const int k_blocks = (t.stage == Stage::L1 ? pr.h_hidden : pr.h_inter) / C::kBlockK;
    if constexpr (kMoeStats) {
      if (first_start < 0) {
        first_start = clock64();
        if (tid == 0) {
          first_start_ns = global_timer_ns();
          atomicMax(&prm.stats->first_tile_not_ns, ~first_start_ns);
        }
      }
    }
    const long long ml_start = stats_clock();
    if constexpr (!C::kFp8) {
      // This warpgroup's rows are rows [64·wg, 64·wg + 64) of the tile; wg = tid / 128, the CTA's warpgroup less the
      // first (warpgroup 0 holds the producer roles, megamoe_kernel.cuh). Taken from canonical_warp_group_idx, which
      // ptxas knows is warp-uniform: from tid / 128 it moved every wgmma descriptor into a uniform register per k-block
      // (docs/MOE.md, "Few rows per expert"). Written as one expression: evaluated in another order, ptxas scheduled
      // the kernel differently.
      const bool idle = expert_rows_in_tile(smem, pr, t, cta_row0) <= 64 * (cutlass::canonical_warp_group_idx() - 1);
      if (idle) mainloop_idle<C>(pipeline, state, k_blocks, prm.wait);
      mainloop_bf16<C>(pipeline, state, mma, tCrA, tCrB, acc, idle ? 0 : k_blocks, prm.wait);
    } else {
      // No skip in fp8: its consumers run at the register limit, and every form of the test tried here (a branch
      // around the mainloop, a loop beside it, a flag inside it) made ptxas spill (80 spill instructions instead of 2
      // in the interleaved kernel for the first), which cost 10-16% on the DeepSeek-V3-like layer at 4096-8192 tokens
      // (docs/MOE.md).
      mainloop_fp8<C>(pipeline, state, mma, tCrA, tCrB, acc, tmp, fp8_scale_source(prm, t, cta_row0, r0), k_blocks, prm.wait);
    }
    const long long ml_end = stats_clock();

    unsigned long long waited = 0;
    long long l1_stored = 0, l1_fenced = 0;
    if (t.stage == Stage::L1) {
      // Read after the mainloop, not kept from before it: fp8's mainloop runs at the register limit.
      l1_epilogue(prm, t, cta_row0, expert_rows_in_tile(smem, pr, t, cta_row0), acc, tCcC, r0, tid, l1_stored, l1_fenced);
      ++l1_tiles;
    } else {
      waited = l2_epilogue(prm, smem, acc, tCcC, j);
      staging_wait += waited;
      ++j;
    }
    last_end = stats_clock();
    if constexpr (kMoeStats) {
      const int i = l1_tiles + j - 1;
      if (tid == 0 && i < prm.trace.capacity)
        prm.trace.tiles[static_cast<std::int64_t>(blockIdx.x) * prm.trace.capacity + i] =
            MoeTileRecord{t.stage == Stage::L1 ? 1u : 2u, static_cast<std::uint32_t>(t.row), ml_start, ml_end, last_end,
                          static_cast<long long>(waited), l1_stored, l1_fenced};
    }
  }
  // This CTA's tiles of each stage into the call's tally (kept out of the statistics policy on purpose: two
  // atomics per CTA cost nothing, and without them ptxas spilled 174 bytes instead of 4 in the fp8 kernels).
  if (tid == 0) {
    atomicAdd(at<std::uint32_t>(prm.local, prm.window.counters.l1_tiles_run()), static_cast<std::uint32_t>(l1_tiles));
    atomicAdd(at<std::uint32_t>(prm.local, prm.window.counters.l2_tiles_run()), static_cast<std::uint32_t>(j));
  }
  if constexpr (kMoeStats) {
    if (tid == 0) {
      MoeCtaAnchor& anchor = prm.trace.anchors[blockIdx.x];
      anchor.end_clock = static_cast<unsigned long long>(clock64());
      anchor.end_ns = global_timer_ns();
      anchor.tiles = static_cast<std::uint32_t>(l1_tiles + j);
      anchor.l2_tiles = static_cast<std::uint32_t>(j);
      if (first_start >= 0) {
        atomicAdd(&prm.stats->consumer_cycles, static_cast<unsigned long long>(last_end - first_start));
        const unsigned long long end_ns = global_timer_ns();
        atomicAdd(&prm.stats->consumer_ns, end_ns - first_start_ns);
        atomicMax(&prm.stats->last_tile_end_ns, end_ns);
        atomicMax(&prm.stats->first_cta_done_not_ns, ~end_ns);
      }
      atomicAdd(&prm.stats->staging_wait_cycles, staging_wait);
    }
  }
}

}  // namespace xstage::moe
