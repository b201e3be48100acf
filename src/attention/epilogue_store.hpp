// Plain epilogue: the finished output tile goes registers -> shared memory (stmatrix, swizzled) -> TMA
// store into the local O tensor; the optional log-sum-exp goes straight from registers to global memory.
//
// The interface every forward epilogue offers (the fused Ulysses remote-store epilogue is a sibling type
// with the same members, chosen by the kernel's template argument; the mainloop never changes):
//   Params / make_params(FlashFwdArgs)        destination description, built on the host
//   SharedStorage                             staging space the epilogue owns
//   begin(params, smem, thread_idx)           called by all consumer threads before their first tile
//   store(params, smem, tOrO, lse, tile, thread_idx)
//                                             called by all consumer threads once per tile with the
//                                             normalised fp32 accumulator fragment of TiledMmaPV
//   finish(params, smem, thread_idx)          called by all consumer threads once at the end, before the
//                                             CTA exits
// The fused Ulysses epilogue (epilogue_all_to_all.hpp) is the sibling with remote destinations.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_conversion.h>

#include "attention/flash_fwd_params.hpp"
#include "attention/mainloop_sm90.hpp"
#include "attention/named_barriers.hpp"
#include "attention/tile_scheduler.hpp"

namespace xstage::attention {

template <class Config>
struct EpilogueStoreTma {
  using Element = typename Config::Element;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kHeadDim = Config::kHeadDim;
  using SmemLayoutO = typename Config::SmemLayoutO;
  using TiledMmaPV = typename Config::TiledMmaPV;
  using TileShapeO = cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>;

  using TmaStoreO = TmaStoreOBmhd<Config>;
  // Its CTAs wait for no other grid: the kernel lets the next one start early (common/grid_dependency.cuh).
  static constexpr bool kWaitsForOtherGrids = false;

  struct Params {
    TmaStoreO tma_o;
    float* lse;  // [batch, heads, seqlen_q] or nullptr
    int seqlen_q, heads, batch;
  };

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutO>, 1024> o;
  };

  static Params make_params(FlashFwdArgs const& args) {
    using namespace cute;
    const FlashFwdProblem& p = args.problem;
    auto mO = make_gmem_bmhd(static_cast<Element*>(args.o), p.seqlen_q, kHeadDim, p.heads, p.batch, p.o);
    return {make_tma_copy(SM90_TMA_STORE{}, mO, SmemLayoutO{}, TileShapeO{}, _1{}), args.lse, p.seqlen_q,
            p.heads, p.batch};
  }

  CUTE_DEVICE static void prefetch_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_o.get_tma_descriptor());
  }

  template <class FragO, int kRows>
  CUTE_DEVICE static void store(Params const& params, SharedStorage& smem, FragO const& tOrO,
                                float const (&lse)[kRows], TileCoord tile, int thread_idx) {
    using namespace cute;
    Tensor sO = make_tensor(make_smem_ptr(smem.o.data()), SmemLayoutO{});

    constexpr int N = decltype(size(tOrO))::value;
    Tensor rO = make_tensor<Element>(tOrO.layout());
    {
      cutlass::NumericArrayConverter<Element, float, N> convert;
      *reinterpret_cast<cutlass::Array<Element, N>*>(rO.data()) =
          convert(*reinterpret_cast<cutlass::Array<float, N> const*>(tOrO.data()));
    }

    // The previous tile's TMA store must have finished reading the staging buffer.
    if (thread_idx == 0) tma_store_wait<0>();
    cutlass::arch::NamedBarrier::sync(Config::kNumMmaThreads, uint32_t(FwdNamedBarrier::kEpilogue));

    TiledMmaPV tiled_mma;
    auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, tiled_mma);
    auto thr_copy = smem_copy.get_thread_slice(thread_idx);
    Tensor tRrO = thr_copy.retile_S(rO);
    Tensor tRsO = thr_copy.partition_D(sO);
    copy(smem_copy, tRrO, tRsO);
    tma_store_fence();  // make the generic-proxy smem writes visible to the TMA (async proxy)
    cutlass::arch::NamedBarrier::sync(Config::kNumMmaThreads, uint32_t(FwdNamedBarrier::kEpilogue));

    if (thread_idx == 0) {
      Tensor mO = params.tma_o.get_tma_tensor(make_shape(params.seqlen_q, int(kHeadDim), params.heads, params.batch));
      Tensor gO = local_tile(mO(_, _, tile.head, tile.batch), TileShapeO{}, make_coord(tile.m_block, _0{}));
      auto [tOgO, tOsO] = tma_partition(params.tma_o, _0{}, Layout<_1>{}, group_modes<0, 2>(sO), group_modes<0, 2>(gO));
      copy(params.tma_o, tOsO, tOgO);  // rows past seqlen_q are clipped by the TMA unit
      tma_store_arrive();
    }

    if (params.lse != nullptr) {
      // Rows of this thread: the (row) mode of the accumulator's (row, col) view; quad lane 0 writes.
      auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
      Tensor cO = make_identity_tensor(TileShapeO{});
      Tensor tOcO = thr_mma.partition_C(cO);
      Tensor rowcol = make_tensor(tOcO.data(), accumulator_rowcol(tOcO.layout()));
      static_assert(decltype(size<0>(rowcol))::value == kRows);
      if (thread_idx % 4 == 0) {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          const int row = tile.m_block * kBlockM + get<0>(rowcol(r, 0));
          if (row < params.seqlen_q) {
            params.lse[lse_offset(params.heads, params.seqlen_q, tile.batch, tile.head, row)] = lse[r];
          }
        }
      }
    }
  }

  CUTE_DEVICE static void begin(Params const&, SharedStorage&, int) {}

  CUTE_DEVICE static void finish(Params const&, SharedStorage&, int thread_idx) {
    if (thread_idx == 0) cute::tma_store_wait<0>();
  }
};

}  // namespace xstage::attention
