// The one place that decides the MegaMoE kernel's tile shapes, pipeline depth, warp roles, register split,
// shared-memory layouts and TMA copy types, per configuration (bf16 or fp8 W8A8, b_n, CTA pairs along N or
// M, a half-full last Linear-2 block; the built ones are listed in kernel/configs.hpp). Every other kernel
// header takes a Config `C` and reads it from here.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include <cstdint>
#include <type_traits>

#include "moe/kernel/configs.hpp"
#include "moe/schedule/scheduler.hpp"

namespace xstage::moe {

// Dispatch pulls rows in units of this many consecutive rows of one scheduler row (dispatch_role).
inline constexpr int kDispatchUnitRows = 16;

// The kernel's named barriers (bar.sync ids; 0 is __syncthreads): the consumer warpgroups at the end of a Linear-1
// epilogue (epilogue_l1.cuh), all 384 threads once every role is done (reduce.cuh), the storer warps at the end of
// each Linear-2 tile (storer.cuh).
inline constexpr int kL1EpilogueBarrier = 1, kRolesDoneBarrier = 2, kStorerBarrier = 3;

// Tile 128 × kBlockN (b_n = 128 or 256), K step one 128-byte swizzle row (64 bf16, 128 fp8). With b_n = 256
// the pipeline has 3 stages and one staging slot (3 × 48 KB + 66 KB of shared memory), with b_n = 128 four
// stages and two slots.
//
// fp8 W8A8 (Element = e4m3): b_n = 256 only, so every L1 tile owns whole 128-column blocks of the
// activation it quantizes. Each 128-wide K block is promoted on its own (fp32(scale_a · scale_w) times the
// block's wgmma sum, added to the fp32 accumulator), which needs a second accumulator; a 64 × 256 one per
// warpgroup would not fit beside the first, so the consumers run the tile as two 64 × 128 wgmma halves into
// one temporary of 64 registers (kMmaN = 128).
//
// kHalfL2: h is an odd multiple of 128 with b_n = 256, so each row's last Linear-2 block is half full (W2 read
// per expert with TMA's zero fill past h, the storers and the fp8 consumers skip the missing half). A separate
// instantiation, so the common case keeps the simpler code: measured, the general one made the fp8 kernel
// 5–8% slower on the DeepSeek-V3-like shape (docs/MOE.md, "The kernel").
//
// kClusterN = 2: CTA pairs (scheduler.hpp's ClusterTiling) as a 2 × 1 thread-block cluster. Both CTAs run the
// same rows with adjacent n-blocks, so each loads half of every A k-block (64 rows) and multicasts it to
// both: the A bytes each SM reads from L2 halve (48 → 40 KB per bf16 k-block at b_n = 256). The stage's
// empty barrier counts both CTAs' consumers (CUTLASS's PipelineTmaAsync with a cluster shape), because
// either CTA's TMA writes into both shared memories.
//
// kClusterM = 2: mixed pairs along M (scheduler.hpp's MixedPairTiling). The layer's scheduler rows are 256 rows
// (MoeProblem::b_m = 256). On an M-row CTA r runs rows [128·r, 128·r + 128) with its own A (both 64-row halves
// loaded itself) and loads half of every B (weight) k-block, multicast into both: 32 instead of 48 KB per bf16
// k-block per SM from L2, and each weight tile read once per pair. On an N-row (an expert's last row with rows in
// its first half only) the pair shares A as the N-pairs do. Both kinds fill each stage with the same bytes.
template <int kBlockN_, class Element_ = cute::bfloat16_t, bool kHalfL2_ = false, int kClusterN_ = 1, int kClusterM_ = 1>
struct MegaMoeConfig {
  using Element = Element_;
  static constexpr bool kHalfL2 = kHalfL2_;
  static constexpr int kClusterN = kClusterN_;  // CTAs on adjacent n-blocks of one row, sharing A
  static constexpr int kClusterM = kClusterM_;  // CTAs on the two 128-row halves of one 256-row row, sharing B
  static constexpr int kClusterSize = kClusterN * kClusterM;
  static_assert(kClusterN == 1 || kClusterN == 2, "CTA pairs at most");
  static_assert(kClusterM == 1 || kClusterM == 2, "CTA pairs at most");
  static_assert(kClusterSize <= 2, "pairs along N or along M, not both");
  static_assert(kClusterSize == 1 || !kHalfL2, "a half-full Linear-2 block has no partner");
  using ClusterShape = cute::Shape<cute::Int<kClusterSize>, cute::_1, cute::_1>;
  static constexpr std::uint16_t kMulticastMask = (1u << kClusterSize) - 1u;  // every CTA of the cluster
  static constexpr bool kFp8 = std::is_same_v<Element, cute::float_e4m3_t>;
  static_assert(kFp8 || std::is_same_v<Element, cute::bfloat16_t>, "bf16 or fp8 e4m3");
  // L2 policy of the weight tiles' TMA loads. A weight tile is read by the few CTAs that run its n-block at
  // about the same time, then not again in the call. Marking it evict-first made the fp8 kernel 4-13% faster
  // on every schedule and shape tried, but the bf16 kernel 0-6% slower (same binary otherwise, same seed, two
  // rounds; docs/MOE.md, "The weights' L2 policy"), so only fp8 uses it.
  static constexpr cute::TMA::CacheHintSm90 kWeightCacheHint =
      kFp8 ? cute::TMA::CacheHintSm90::EVICT_FIRST : cute::TMA::CacheHintSm90::EVICT_NORMAL;
  static constexpr int kBlockM = 128, kBlockN = kBlockN_, kBlockK = 128 / int(sizeof(Element));
  static_assert(kClusterM == 1 || kBlockM == MixedPairTiling::kHalfRows, "an M-pair's CTA runs one half of a scheduler row");
  static_assert(kBlockN == 128 || kBlockN == 256, "b_n is 128 or 256");
  static_assert(!kFp8 || kBlockN == 256, "fp8: L1 tiles of 256 columns own whole 128-column activation scale blocks");
  static_assert(!kHalfL2 || kBlockN == 256, "a half-full Linear-2 block is half of a 256-wide tile");
  static constexpr int kMmaN = kFp8 ? 128 : kBlockN;  // columns of one wgmma instruction
  static constexpr int kStages = kBlockN == 128 ? 4 : 3;
  static constexpr int kStagingSlots = kBlockN == 128 ? 2 : 1;
  static constexpr int kThreads = 384;
  static constexpr int kConsumerThreads = 256;
  static constexpr int kDispatchWarps = 1, kStorerWarps = 2;  // warp 1; warps 2-3 (warp 0: TMA producer)
  static_assert(1 + kDispatchWarps + kStorerWarps == 4 && kDispatchUnitRows % kDispatchWarps == 0, "warpgroup 0's roles");
  // Registers per thread after setmaxnreg (warpgroup 0's roles; the consumers). setmaxnreg only moves
  // registers between the CTA's warps: the pool is what the launch gave the CTA (384 threads × 168, the
  // most ptxas gives a 384-thread kernel), and an increase that the pool cannot cover waits forever, so
  // the split must fit it exactly. fp8's consumers hold a 64-register temporary beside the accumulator:
  // 224 for them, and the dispatch warp moves 4 instead of 8 16-byte pieces per lane at a time (fp8 rows
  // are half as long) so warpgroup 0 fits in 56.
  static constexpr int kLaunchRegisters = 168;
  static constexpr int kProducerRegisters = kFp8 ? 56 : 72, kConsumerRegisters = kFp8 ? 224 : 216;
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * kConsumerThreads <= kLaunchRegisters * kThreads,
                "setmaxnreg would wait forever for registers the CTA does not have");
  // Store steps a storer warp has in flight (storer.cuh): each holds a 16-byte staged piece and a destination
  // pointer per lane (6 registers), so 8 fit in warpgroup 0's 72 registers and 4 in fp8's 56.
  static constexpr int kStoreBatch = kProducerRegisters >= 72 ? 8 : 4;
  static constexpr int kDispatchChunks = kFp8 ? 4 : 8;
  static constexpr int kStagingPitch = kBlockN + 8;  // bf16 per staged row: 16 B aligned, no bank conflicts
  static constexpr int kMaxLocalExperts = kMegaMoeMaxLocalExperts;
  static constexpr int kMaxCounts = kMegaMoeMaxCounts;  // P · E_local counts cached in shared memory
  using SmemAtom = cute::GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutA = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockK>, cute::Int<kStages>>{}));
  using SmemLayoutB = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kBlockK>, cute::Int<kStages>>{}));
  // The B stages as the wgmma reads them: (kMmaN, K, stages · kBlockN/kMmaN). The swizzle atom is 8 rows,
  // so rows [128, 256) of a stage are simply the next 128-row block: half h of stage s is index 2s + h.
  using SmemLayoutBMma = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::Shape<cute::Int<kMmaN>, cute::Int<kBlockK>, cute::Int<kStages * (kBlockN / kMmaN)>>{}));
  using TileShapeA = cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockK>>;
  using TileShapeB = cute::Shape<cute::Int<kBlockN>, cute::Int<kBlockK>>;
  template <int kN>
  using TiledMmaN = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kN>, cute::Int<kBlockK>>>(),
      cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
  using TiledMma = TiledMmaN<kMmaN>;       // what the mainloop issues
  using TiledMmaTile = TiledMmaN<kBlockN>; // the whole tile's accumulator layout (the epilogues)
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  static constexpr int kStageBytes = (kBlockM + kBlockN) * kBlockK * int(sizeof(Element));  // A + B
  // Every GEMM operand is a row-major [rows][K] matrix: one TMA copy type per box shape. A is split over
  // the cluster's CTAs (each loads kBlockM / kClusterSize rows and multicasts them; mixed pairs' M-rows load both
  // halves themselves), B over the M-pair's CTAs the same way.
  using GmemTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)),
                                                cute::Shape<int32_t, int32_t>{}, cute::Stride<int64_t, cute::_1>{}));
  using TmaOpA = std::conditional_t<kClusterSize == 1, cute::SM90_TMA_LOAD, cute::SM90_TMA_LOAD_MULTICAST>;
  using TmaLoadA = decltype(cute::make_tma_copy(TmaOpA{}, GmemTensor{}, cute::take<0, 2>(SmemLayoutA{}), TileShapeA{},
                                                cute::Int<kClusterSize>{}));
  using TmaOpB = std::conditional_t<kClusterM == 1, cute::SM90_TMA_LOAD, cute::SM90_TMA_LOAD_MULTICAST>;
  using TmaLoadB = decltype(cute::make_tma_copy(TmaOpB{}, GmemTensor{}, cute::take<0, 2>(SmemLayoutB{}), TileShapeB{},
                                                cute::Int<kClusterM>{}));
  // W2 as [E_local][h][h_inter] with the expert as its own mode: a half-full last n-block (h an odd multiple of
  // 128 with b_n = 256) reads zeros past the expert's h rows instead of the next expert's weights.
  using GmemTensorExperts = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)),
                                                       cute::Shape<int32_t, int32_t, int32_t>{},
                                                       cute::Stride<int64_t, cute::_1, int64_t>{}));
  using TmaLoadW2 = std::conditional_t<kHalfL2,
                                       decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensorExperts{},
                                                                    cute::take<0, 2>(SmemLayoutB{}), TileShapeB{}, cute::_1{})),
                                       TmaLoadB>;  // else W2 as one [E_local·h][h_inter] matrix, like W1
  // Mixed pairs load the operand they do not share whole, through a second, undivided copy of each descriptor
  // (two half-box loads instead made the producer spill: fp8 interleaved 156 instead of 60 bytes; docs/MOE.md,
  // "M-pairs").
  struct NoTma {};
  using TmaLoadAWhole = std::conditional_t<kClusterM == 2, decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{},
                                           cute::take<0, 2>(SmemLayoutA{}), TileShapeA{}, cute::_1{})), NoTma>;
  using TmaLoadBWhole = std::conditional_t<kClusterM == 2, decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{},
                                           cute::take<0, 2>(SmemLayoutB{}), TileShapeB{}, cute::_1{})), NoTma>;
};

// The MegaMoeConfig of each built configuration (kernel/configs.hpp's columns).
template <DType>
struct ElementOf;
template <>
struct ElementOf<DType::bf16> {
  using type = cute::bfloat16_t;
};
template <>
struct ElementOf<DType::fp8_e4m3> {
  using type = cute::float_e4m3_t;
};
template <MegaMoeConfigId kId>
struct MegaMoeConfigFor {
  static constexpr MegaMoeConfigSpec kSpec = spec_of(kId);
  using type = MegaMoeConfig<kSpec.b_n, typename ElementOf<kSpec.dtype>::type, kSpec.half_l2, kSpec.cluster_n, kSpec.cluster_m>;
};

}  // namespace xstage::moe
