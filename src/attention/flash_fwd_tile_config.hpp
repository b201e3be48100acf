// The one place that decides tile shapes, pipeline depth, warp roles and shared-memory layouts
// of the forward kernel, per head dimension.
//
// The numbers themselves (consumer warpgroups, b_n, stages per configuration) are in tile_shapes.hpp.
// Shared memory: Q (b_m x d), K and V (stages x b_n x d), O staging (b_m x d), all bf16 with CuTe's
// 128-byte-swizzled K-major GMMA atom; Vt is V seen transposed (an MN-major B operand for O += P V).
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cutlass/numeric_types.h>

#include "attention/tile_shapes.hpp"

namespace xstage::attention {

// The kernels a configuration is compiled into: the plain forward (its own output) or the fused Ulysses forward (the
// all-to-all epilogue) with either store path. ptxas schedules their shared key-block loop differently, so a knob of
// that loop that leaves the output's bits unchanged may take its value per family (kLoopRowMaxTests does). The knobs
// that change the bits (the exponentials before the P·V wait, the reduction chains) are one value for all, so that the
// fused output stays bit-identical to the serial layer's.
enum class FwdKernelFamily { plain, all_to_all_tma, all_to_all_st_global };

template <int kHeadDim_, int kBlockN_, int kStages_, int kNumMmaWarpGroups_, FwdKernelFamily kFamily_ = FwdKernelFamily::plain>
struct FlashFwdTileConfig {
  static constexpr FwdKernelFamily kFamily = kFamily_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNumMmaWarpGroups = kNumMmaWarpGroups_;
  static constexpr int kBlockM = 64 * kNumMmaWarpGroups;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;

  // Warp roles: warpgroup 0 is the producer (its warp 0 walks the loads, that warp's lane 0 issues them),
  // warpgroups 1..n are the consumers (wgmma + softmax), each owning 64 of the b_m rows.
  static_assert(kNumMmaWarpGroups == 2 || kNumMmaWarpGroups == 3, "2 or 3 consumer warpgroups");
  static constexpr int kNumMmaThreads = 128 * kNumMmaWarpGroups;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  // setmaxnreg budgets (registers per thread): 24*128 + 240*256 = 64512 and 32*128 + 160*384 = 65536. setmaxnreg only
  // moves registers within what the launch gave the CTA (__launch_bounds__(kNumThreads, 1): 65536 / kNumThreads per
  // thread, rounded down to 8: 168 * 384 = 64512, 128 * 512 = 65536); a consumer increase that the producer's decrease
  // does not cover waits forever (a producer of 32 with two consumer warpgroups hung every launch:
  // results/h100/attention/2026-12-06-cta-pairs/). The fused kernels take the same split: 40 / 232 helped their
  // d = 64 loop and cost their d = 128 loop (results/h100/attention/2026-12-07-fused-knobs/).
  static constexpr int kProducerRegisters = kNumMmaWarpGroups == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kNumMmaWarpGroups == 2 ? 240 : 160;
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * kNumMmaThreads <= (65536 / kNumThreads) / 8 * 8 * kNumThreads,
                "the warpgroups' setmaxnreg budgets must fit in the registers the launch allocates");

  // Columns per row (of the b_n / 4 a thread holds) whose exponentials a softmax step takes before it waits for the
  // previous block's P·V wgmma; the rest run after that wait, beside the O rescale and the bf16 conversion.
  // 16 of 40 (d = 128), 48 (d = 64, 2 warpgroups) or 32 (3 warpgroups): 3% faster in geometric mean on the DiT shapes
  // than none (ptxas's own placement), while 24 or 32 were no faster or slower and all of them 3.5% slower
  // (results/h200/attention/2026-12-02-first-exps/, 2026-12-01-wait-placement/).
  static constexpr int kExpColsBeforePvWait = 16;
  // Independent chains of the softmax's row maxima and sums (OnlineSoftmax): 4 with two consumer warpgroups; 2 with
  // three, whose 160 registers have no room for 4 and where 2 measured 1.3-1.8% faster than 1 on the d = 64 shapes
  // (results/h200/attention/2026-12-02-wg3/).
  static constexpr int kSoftmaxChains = kNumMmaWarpGroups == 2 ? 4 : 2;
  // Whether the key-block loop keeps the -inf tests of the running row maximum, which only a tile's first block needs
  // (OnlineSoftmax::new_row_max): the same bits either way, but without them ptxas schedules the three-warpgroup loop
  // 1.7-1.8% faster and the plain two-warpgroup loops 1-4% slower (results/h200/attention/2026-12-02-finite-max/). The
  // fused two-warpgroup kernels that store by TMA come 0.4-1.6 points closer to the plain kernel without them, the
  // 16-byte-store ones at d = 64 up to 0.5 point further (results/h100/attention/2026-12-07-inf-tests-rounds/).
  static constexpr bool kLoopRowMaxTests = kNumMmaWarpGroups == 2 && kFamily != FwdKernelFamily::all_to_all_tma;

  using Element = cutlass::bfloat16_t;
  using Accum = float;

  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim must be 64 or 128");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "b_n must be a multiple of 16, at most 256");

  // S = Q K^T: both operands from shared memory (SS); O += P V: P from registers (RS), V^T MN-major.
  using AtomLayoutMma = cute::Layout<cute::Shape<cute::Int<kNumMmaWarpGroups>, cute::_1, cute::_1>>;
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, Accum,
                                 cute::Shape<cute::_64, cute::Int<kBlockN>, cute::Int<kHeadDim>>>(),
      AtomLayoutMma{}));
  using TiledMmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, Accum,
                                 cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      AtomLayoutMma{}));

  using SmemAtom = cute::GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ =
      decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  // V^T (d x b_n x stages): the same bytes as V, indexed transposed.
  using SmemLayoutVt = decltype(cute::composition(
      SmemLayoutKV{},
      cute::make_ordered_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>, cute::Int<kStages>>{},
                                cute::Step<cute::_2, cute::_1, cute::_3>{})));
  using SmemLayoutO = SmemLayoutQ;

  static constexpr int kQBytes = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kKVBlockBytes = kBlockN * kHeadDim * int(sizeof(Element));
};

// The instantiated configurations, by id (tile_shapes.hpp) and kernel family.
template <FwdTileConfigId kId, FwdKernelFamily kFamily = FwdKernelFamily::plain>
struct FlashFwdTileConfigFor {
  static constexpr FwdTileShape kShape = fwd_tile_shape(kId);
  using type = FlashFwdTileConfig<kShape.head_dim, kShape.block_n, kShape.stages, kShape.consumer_warpgroups, kFamily>;
};

}  // namespace xstage::attention
