// The TMA producer role (warp 0, lane 0): walks this CTA's tiles, waits (bounded) for each tile's inputs —
// dispatch_ready for Linear-1, l1_done for Linear-2, l2_done when a ring slot is reused — and loads the A
// and B k-blocks into the kStages-deep shared-memory pipeline; with CTA pairs it loads its share of the
// shared operand and multicasts it to both CTAs (kernel/config.hpp).
#pragma once

#include <cute/tensor.hpp>

#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"
#include "moe/kernel/tile_walk.cuh"

namespace xstage::moe {

template <class Schedule, class C>
__device__ void producer_role(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem, typename C::Pipeline& pipeline) {
  using namespace cute;
  const MoeProblem& pr = prm.problem;
  const SymmetricWindow& w = prm.window;
  const int EL = pr.E_local();
  Tensor sA = make_tensor(make_smem_ptr(smem.a.data()), typename C::SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(smem.b.data()), typename C::SmemLayoutB{});
  Tensor mA1 = prm.tma_a1.get_tma_tensor(make_shape(int32_t(w.dispatch.capacity_rows), pr.h_hidden));
  Tensor mB1 = prm.tma_b1.get_tma_tensor(make_shape(EL * 2 * pr.h_inter, pr.h_hidden));
  Tensor mA2 = prm.tma_a2.get_tma_tensor(make_shape(w.ring.slots * pr.b_m, pr.h_inter));
  auto mB2 = [&] {
    if constexpr (C::kHalfL2) return prm.tma_b2.get_tma_tensor(make_shape(pr.h_hidden, pr.h_inter, EL));
    else return prm.tma_b2.get_tma_tensor(make_shape(EL * pr.h_hidden, pr.h_inter));
  }();
  auto state = cutlass::make_producer_start_state<typename C::Pipeline>();

  // Mixed pairs: the undivided descriptors' coordinate tensors (unused otherwise).
  auto whole = [&](auto const& tma, auto shape) {
    if constexpr (C::kClusterM == 2) return tma.get_tma_tensor(shape);
    else return 0;
  };
  auto mA1w = whole(prm.tma_a1_whole, make_shape(int32_t(w.dispatch.capacity_rows), pr.h_hidden));
  auto mB1w = whole(prm.tma_b1_whole, make_shape(EL * 2 * pr.h_inter, pr.h_hidden));
  auto mA2w = whole(prm.tma_a2_whole, make_shape(w.ring.slots * pr.b_m, pr.h_inter));
  auto mB2w = whole(prm.tma_b2_whole, make_shape(EL * pr.h_hidden, pr.h_inter));

  // One tile's k-blocks into the pipeline: A as share a_idx of a_parts CTAs (one TMA copy, multicast to a_mask),
  // B likewise.
  auto load = [&](auto const& tma_a, auto const& mA, int a_block, auto a_parts, int a_idx, std::uint16_t a_mask,
                  auto const& tma_b, auto const& mB, int b_block, auto b_parts, int b_idx, std::uint16_t b_mask) {
    Tensor gA = local_tile(mA, typename C::TileShapeA{}, make_coord(a_block, _));  // (128, 64, k-blocks)
    Tensor gB = local_tile(mB, typename C::TileShapeB{}, make_coord(b_block, _));  // (b_n, 64, k-blocks)
    auto [tAgA, tAsA] = tma_partition(tma_a, a_idx, Layout<decltype(a_parts)>{}, group_modes<0, 2>(sA), group_modes<0, 2>(gA));
    auto [tBgB, tBsB] = tma_partition(tma_b, b_idx, Layout<decltype(b_parts)>{}, group_modes<0, 2>(sB), group_modes<0, 2>(gB));
    const TMA::CacheHintSm90 weight_hint = C::kWeightCacheHint;  // with() binds references
    const int k_blocks = size<2>(gA);
    for (int kb = 0; kb < k_blocks; ++kb) {
      comm::bounded_producer_acquire(pipeline, state, prm.wait, static_cast<int>(MoeWait::pipeline_empty));
      auto* bar = pipeline.producer_get_barrier(state);
      copy(tma_a.with(*bar, a_mask), tAgA(_, kb), tAsA(_, state.index()));
      copy(tma_b.with(*bar, b_mask, weight_hint), tBgB(_, kb), tBsB(_, state.index()));
      ++state;
    }
  };
  // One CTA per tile: both whole. N-pairs: A split and multicast. Mixed pairs: on an M-row A whole and B split
  // and multicast, on an N-row A split and multicast and B whole.
  const int r = static_cast<int>(blockIdx.x) % C::kClusterSize;
  const std::uint16_t all = C::kMulticastMask;
  auto load_tile = [&](bool m_row, auto const& tma_a, auto const& mA, auto const& tma_a_whole, auto const& mA_whole, int a_block,
                       auto const& tma_b, auto const& mB, auto const& tma_b_whole, auto const& mB_whole, int b_block) {
    if constexpr (C::kClusterM == 1)
      load(tma_a, mA, a_block, Int<C::kClusterN>{}, r, C::kClusterN > 1 ? all : 0, tma_b, mB, b_block, _1{}, 0, 0);
    else if (m_row)
      load(tma_a_whole, mA_whole, a_block, _1{}, 0, 0, tma_b, mB, b_block, _2{}, r, all);
    else
      load(tma_a, mA, a_block, _2{}, r, all, tma_b_whole, mB_whole, b_block, _1{}, 0, 0);
  };

  const Schedule sched = make_device_schedule<Schedule>(prm, smem.first_row);
  unsigned long long wait_cycles = 0;
  for (CtaTileWalk<Schedule, C> walk(sched, smem.n_row_last, blockIdx.x); walk.next();) {
    const Tile t = walk.tile;
    const int slot = w.ring.slot(t.row);
    const long long t0 = stats_clock();
    if (t.stage == Stage::L1) {
      wait_counter<false>(prm.wait, at<std::uint32_t>(prm.local, w.counters.dispatch_ready(t.row)), pr.b_m,
                          MoeWait::dispatch_ready, t.row);
      // A reused ring slot (not with mixed pairs: they run on the plain ring, see TileWalk::l1_target).
      if (C::kClusterM == 1 && w.ring.generation(t.row) > 0)
        wait_counter<false>(prm.wait, at<std::uint32_t>(prm.local, w.counters.l2_done(slot)),
                            slot_free_target(t.row, w.ring.slots, pr.P2_l2_n_blocks()), MoeWait::l2_done, slot);
      fence_proxy_async_global();
      wait_cycles += stats_clock() - t0;
      // A in 128-row blocks: block row·kClusterM + half is this CTA's half of the scheduler row.
      load_tile(walk.m_row, prm.tma_a1, mA1, prm.tma_a1_whole, mA1w, t.row * C::kClusterM + walk.half,
                prm.tma_b1, mB1, prm.tma_b1_whole, mB1w, t.expert * pr.P1_l1_n_blocks() + t.n_block);
    } else {
      wait_counter<false>(prm.wait, at<std::uint32_t>(prm.local, w.counters.l1_done(slot)),
                          walk.l1_target(w.ring.slots), MoeWait::l1_done, slot);
      fence_proxy_async_global();
      wait_cycles += stats_clock() - t0;
      if constexpr (C::kHalfL2)
        load_tile(walk.m_row, prm.tma_a2, mA2, prm.tma_a2_whole, mA2w, slot, prm.tma_b2, mB2(_, _, t.expert), prm.tma_b2_whole, mB2w,
                  t.n_block);
      else
        load_tile(walk.m_row, prm.tma_a2, mA2, prm.tma_a2_whole, mA2w, slot * C::kClusterM + walk.half,
                  prm.tma_b2, mB2, prm.tma_b2_whole, mB2w, t.expert * pr.P2_l2_n_blocks() + t.n_block);
    }
  }
  stats_add(&prm.stats->producer_wait_cycles, wait_cycles);
}

// Pulls dispatch rows in units of kDispatchUnitRows consecutive rows of one scheduler row, unit u = g, g + Gs,
// ... in increasing order, so that all CTAs together fill scheduler rows front to back (the order the L1
// stream consumes them) instead of each CTA filling whole rows of its own. Dispatch warp `dw` takes its share
// of each unit's rows: lanes resolve the rows' sources in parallel (remote 4-byte loads), then the whole

}  // namespace xstage::moe
