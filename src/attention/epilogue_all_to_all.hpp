// The fused Ulysses epilogue (paper §4.3, "piggyback"): the sibling of EpilogueStoreTma that writes each
// finished output tile straight into the output window of the rank that owns its rows (ulysses/layout.hpp)
// with remote stores, and goes on to its next tile. The next tile's Q-loop is the drain window: no
// communication warps, no SMs set aside, no host round trip.
//
// Two store paths (comm/device/remote_store.cuh), chosen by the template argument:
//   A2AStorePath::tma        registers -> shared memory (stmatrix, as the plain epilogue) -> one TMA tensor
//                            store into the rank that owns the tile's first row, clipped by the TMA unit to that
//                            rank's rows; one thread issues it and the warps go on at once (the staging stays
//                            busy until the data is at the peer); the rows of a tile that straddles into the next
//                            rank go by 16-byte stores (a TMA store takes no negative coordinate);
//   A2AStorePath::st_global  the same staging, then every consumer thread stores 16-byte pieces to the owners:
//                            the warps stall while the X-Stage back-pressures.
//
// Output windows are double-buffered by call parity ([2·B][Ms][H][d] per rank): call e writes half e mod 2.
// With the receivers' completion waits that makes the layer safe without a start-of-call handshake: a rank
// starts call e + 2 only after its call e + 1 saw every rank's rows arrive, and every rank sent those only
// after it had finished consuming (copying out) its half of call e.
//
// Completion: each CTA counts the row-heads it delivered to each rank; after its last tile it waits for its
// stores to complete, passes its barrier, and one thread adds the counts to the receivers' arrival counters with one
// release at system scope (cumulative over the stores the barrier ordered before it). The last CTA
// of the grid advances the call counter (comm/device/call_epoch.cuh) and, with real ranks, waits (bounded) until
// its own counter holds every rank's rows of this call, so the kernel's completion means the output is
// there. With virtual ranks (one process and one GPU holding all P ranks' buffers, for tests) the ranks'
// kernels run one after another, so that wait is made by the copy-out kernel after all of them (ulysses/layer.cu).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_conversion.h>

#include <cstdint>

#include "attention/flash_fwd_params.hpp"
#include "attention/mainloop_sm90.hpp"
#include "attention/named_barriers.hpp"
#include "attention/tile_scheduler.hpp"
#include "attention/ulysses/destinations.hpp"
#include "attention/ulysses/layout.hpp"
#if defined(__CUDACC__)
#include "comm/device/bounded_wait.cuh"
#include "comm/device/call_epoch.cuh"
#include "comm/device/remote_store.cuh"
#endif

namespace xstage::attention {

template <class Config, A2AStorePath kPath>
struct EpilogueAllToAll {
  using Element = typename Config::Element;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kThreads = Config::kNumMmaThreads;
  using SmemLayoutO = typename Config::SmemLayoutO;
  using TiledMmaPV = typename Config::TiledMmaPV;
  using TileShapeO = cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>;
  using TmaStoreO = TmaStoreOBmhd<Config>;
  struct NoTma {};
  using Descriptors = std::conditional_t<kPath == A2AStorePath::tma, TmaStoreO, NoTma>;
  // With real ranks its last CTA waits for the peers' rows, and its mainloop may wait for arriving inputs (fused_both):
  // the kernel leaves the next one's start to its exit (common/grid_dependency.cuh).
  static constexpr bool kWaitsForOtherGrids = true;

  struct Params {
    AllToAllDestinations dst;
    Descriptors tma_o[kMaxUlyssesRanks];  // TMA path: rank j's window as (Ms, d, H, 2·B)
  };

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutO>, 1024> o;
    std::uint32_t rows_to[kMaxUlyssesRanks];  // row-heads this CTA delivered to each rank
    std::uint32_t epoch;
  };

  static Params make_params(FlashFwdArgs const& args, AllToAllDestinations const& dst) {
    using namespace cute;
    Params p;
    p.dst = dst;
    if constexpr (kPath == A2AStorePath::tma) {
      const UlyssesShape& s = dst.shape;
      const BmhdStrides w = packed_bmhd_strides(s.shard_rows(), s.heads, kHeadDim);
      for (int j = 0; j < s.ranks; ++j) {
        auto mO = make_gmem_bmhd(static_cast<Element*>(dst.window[j]), s.shard_rows(), kHeadDim, s.heads, 2 * s.batch, w);
        p.tma_o[j] = make_tma_copy(SM90_TMA_STORE{}, mO, SmemLayoutO{}, TileShapeO{}, _1{});
      }
    }
    (void)args;
    return p;
  }

#if defined(__CUDACC__)
  CUTE_DEVICE static void prefetch_descriptors(Params const& params) {
    if constexpr (kPath == A2AStorePath::tma)
      for (int j = 0; j < params.dst.shape.ranks; ++j) cute::prefetch_tma_descriptor(params.tma_o[j].get_tma_descriptor());
  }

  // Before the first tile, all consumer threads; the first store's barrier publishes it.
  CUTE_DEVICE static void begin(Params const& params, SharedStorage& smem, int thread_idx) {
    if (thread_idx == 0) {
      smem.epoch = comm::current_call(params.dst.calls);
      for (int j = 0; j < kMaxUlyssesRanks; ++j) smem.rows_to[j] = 0;
    }
  }

  // Rows [r_begin, b_m) of the staged tile (sequence rows m0 + r, those past M skipped) to their owners' windows
  // by 16-byte stores, d/8 pieces per row strided over the consumer threads.
  template <class SmemTensor>
  CUTE_DEVICE static void store_rows_st_global(Params const& params, SmemTensor const& sO, int m0, int r_begin, int parity_batch,
                                               int head, int thread_idx) {
    const UlyssesShape& s = params.dst.shape;
    constexpr int kPiecesPerRow = kHeadDim / 8;
    const std::int64_t row_pitch = static_cast<std::int64_t>(s.heads) * kHeadDim;  // elements
    for (int piece = r_begin * kPiecesPerRow + thread_idx; piece < kBlockM * kPiecesPerRow; piece += kThreads) {
      const int r = piece / kPiecesPerRow, c = (piece % kPiecesPerRow) * 8;
      const int m = m0 + r;
      if (m >= s.seqlen) break;  // rows only grow with piece
      const int j = s.owner_of_row(m);
      const uint4 v = *reinterpret_cast<const uint4*>(&sO(r, c));
      Element* base = static_cast<Element*>(params.dst.window[j]);
      const std::int64_t offset =
          (static_cast<std::int64_t>(parity_batch) * s.shard_rows() + s.row_in_owner(m)) * row_pitch + static_cast<std::int64_t>(head) * kHeadDim + c;
      *reinterpret_cast<uint4*>(base + offset) = v;
    }
  }

  template <class FragO, int kRows>
  CUTE_DEVICE static void store(Params const& params_in, SharedStorage& smem, FragO const& tOrO, float const (&lse)[kRows],
                                TileCoord tile, int thread_idx) {
    using namespace cute;
    // The parameters through a pointer the compiler cannot see through: otherwise ptxas hoists their loads out of the
    // tile loop into uniform registers that stay live across the key-block loop, which then schedules worse than the
    // plain kernel's (d = 128: 15 more UMOV per step; docs/ATTENTION.md). They are read once per tile.
    Params const* pp = &params_in;
    asm volatile("" : "+l"(pp));
    Params const& params = *pp;
    const UlyssesShape& s = params.dst.shape;
    Tensor sO = make_tensor(make_smem_ptr(smem.o.data()), SmemLayoutO{});
    constexpr int N = decltype(size(tOrO))::value;
    Tensor rO = make_tensor<Element>(tOrO.layout());
    {
      cutlass::NumericArrayConverter<Element, float, N> convert;
      *reinterpret_cast<cutlass::Array<Element, N>*>(rO.data()) =
          convert(*reinterpret_cast<cutlass::Array<float, N> const*>(tOrO.data()));
    }
    // The previous tile's stores must have finished reading the staging buffer.
    if constexpr (kPath == A2AStorePath::tma)
      if (thread_idx == 0) tma_store_wait<0>();
    cutlass::arch::NamedBarrier::sync(kThreads, uint32_t(FwdNamedBarrier::kEpilogue));

    TiledMmaPV tiled_mma;
    auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, tiled_mma);
    auto thr_copy = smem_copy.get_thread_slice(thread_idx);
    copy(smem_copy, thr_copy.retile_S(rO), thr_copy.partition_D(sO));
    if constexpr (kPath == A2AStorePath::tma) tma_store_fence();  // generic-proxy smem writes -> TMA
    cutlass::arch::NamedBarrier::sync(kThreads, uint32_t(FwdNamedBarrier::kEpilogue));

    const int m0 = tile.m_block * kBlockM;
    const int parity_batch = static_cast<int>(smem.epoch & 1u) * s.batch + tile.batch;
    const int head = s.global_head(params.dst.rank, tile.head);
    if (thread_idx == 0)
      for_each_tile_segment(s, m0, kBlockM, [&](RowSegment g) { smem.rows_to[g.rank] += static_cast<std::uint32_t>(g.rows); });
    // The tile's first rows go to the owner of row m0, up to the end of its shard; the rest (a tile that straddles
    // into the next rank) from row `straddle` on.
    const int j0 = s.owner_of_row(m0);
    const int straddle = (j0 + 1) * s.shard_rows() - m0;
    const bool straddles = straddle < kBlockM && m0 + straddle < s.seqlen;

    if constexpr (kPath == A2AStorePath::tma) {
      // The first segment by one TMA store into its rank's window, at row m0 - j·Ms >= 0: the TMA unit writes only
      // the rows inside [0, Ms) of rank j. A segment that starts inside the tile (the tile straddles a rank
      // boundary) would need a negative box coordinate, which a TMA store does not take (illegal instruction on
      // H200): those rows go by 16-byte stores from the same staging, from every consumer thread.
      if (thread_idx == 0) {
        const int j = j0;
        Tensor mO = params.tma_o[j].get_tma_tensor(make_shape(s.shard_rows(), int(kHeadDim), s.heads, 2 * s.batch));
        Tensor gO = local_tile(mO(_, _, head, parity_batch), TileShapeO{}, make_coord(0, _0{}));
        Tensor gOj = domain_offset(make_coord(m0 - j * s.shard_rows(), _0{}), gO);
        auto [tOgO, tOsO] = tma_partition(params.tma_o[j], _0{}, Layout<_1>{}, group_modes<0, 2>(sO), group_modes<0, 2>(gOj));
        copy(params.tma_o[j], tOsO, tOgO);
        tma_store_arrive();
      }
      if (straddles) store_rows_st_global(params, sO, m0, straddle, parity_batch, head, thread_idx);
    } else {
      store_rows_st_global(params, sO, m0, 0, parity_batch, head, thread_idx);
    }
    (void)lse;
  }

  // After the last tile, all consumer threads.
  CUTE_DEVICE static void finish(Params const& params, SharedStorage& smem, int thread_idx) {
    // Every bulk store written, at the peers too (wait_group, not wait_group.read: the staging is not enough).
    if constexpr (kPath == A2AStorePath::tma)
      if (thread_idx == 0) comm::bulk_wait_all();
    // The barrier orders every thread's 16-byte stores before thread 0's counts, whose release (at system scope) is
    // cumulative: one release per counter, no fence per thread (the pattern of a grid barrier).
    cutlass::arch::NamedBarrier::sync(kThreads, uint32_t(FwdNamedBarrier::kEpilogue));
    if (thread_idx != 0) return;
    const AllToAllDestinations& d = params.dst;
    comm::signal_arrivals(d.arrived, smem.rows_to, d.shape.ranks);
    const std::uint32_t epoch = smem.epoch;
    if (comm::finish_cta(d.calls, epoch, gridDim.x) && d.wait_for_arrivals)
      comm::wait_counter<true>(d.wait, d.arrived[d.rank], epoch * d.shape.arrivals_per_call(),
                               static_cast<int>(UlyssesWait::arrivals), -1);
  }
#endif
};

template <class Config>
using EpilogueAllToAllTma = EpilogueAllToAll<Config, A2AStorePath::tma>;
template <class Config>
using EpilogueAllToAllStGlobal = EpilogueAllToAll<Config, A2AStorePath::st_global>;

}  // namespace xstage::attention
