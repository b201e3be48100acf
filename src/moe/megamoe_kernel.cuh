// The MegaMoE kernel for Hopper (sm_90a), bf16 or fp8 W8A8: dispatch -> Linear-1 -> SwiGLU -> Linear-2 ->
// combine in one persistent, warp-specialized kernel, one CTA per SM (docs/MOE.md, "Hopper kernel mapping").
//
// 384 threads per CTA:
//   warp 0, lane 0   TMA producer: walks the schedule; per tile waits for its inputs (dispatch_ready for
//                    L1, l1_done for L2, l2_done when a ring slot is reused), then loads the A and B
//                    k-blocks into a kStages-deep shared-memory pipeline.
//   warp 1           dispatch: pulls token rows from the source ranks' token buffers over NVLink into the
//                    local expert-major dispatch buffer (all CTAs together, front to back), writes each
//                    row's RowSource, raises dispatch_ready[p].
//   warps 2-3        storers: drain the staging of each L2 tile (half the rows each) with 16-byte remote
//                    stores into the source rank's combine buffer (the X-Stage traffic), then fence and
//                    add the rows to that source's combine_arrived.
//   warpgroups 1-2   consumers: 64 rows each of the 128 x b_n tile (b_n = 128 or 256), wgmma with both
//                    operands in shared memory. L1 epilogue: SwiGLU in registers (gate column c and up
//                    column c + b_n/2 sit in the same thread), bf16 into the ring, l1_done. L2 epilogue:
//                    wait for a free staging slot (where back-pressure from the stores reaches the tensor
//                    cores), write it, signal the storers.
//                    fp8: each 128-wide K block goes into a temporary and is promoted into the fp32
//                    accumulator with its scale pair; the L1 epilogue quantizes each row's 128 SwiGLU values
//                    (1×128, fp8.hpp's rule) into ring codes + one ring scale; L2 still stages bf16.
// After every role is done, the CTA waits until every owner has stored all rows of this rank's tokens
// (combine_arrived) and computes its share of the top-k weighted sum (fp32) into the output.
//
// The schedule (ExpertWaveSchedule or InterleavedSchedule, scheduler.hpp) is a template parameter: it
// only orders tiles, the counters keep every dependency.
#pragma once

#include <cuda_bf16.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <type_traits>

#include "common/sm90_wgmma.cuh"
#include "moe/bf16x8.cuh"
#include "moe/fp8.hpp"
#include "moe/layout.hpp"
#include "moe/megamoe_device.cuh"
#include "moe/problem.hpp"
#include "moe/routing.hpp"
#include "moe/scheduler.hpp"

namespace xstage::moe {

// Dispatch pulls rows in units of this many consecutive rows of one scheduler row (dispatch_role).
inline constexpr int kDispatchUnitRows = 16;

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
// 5–8% slower on the DeepSeek-V3-like shape (results/h200x2/moe/run22-half-block-cost).
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
  // on every schedule and shape tried, but the bf16 kernel 0-6% slower (results/h200x2/moe/run25-weight-
  // cache-hint: same binary otherwise, same seed, two rounds), so only fp8 uses it.
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
  static constexpr int kDispatchChunks = kFp8 ? 4 : 8;
  static constexpr int kStagingPitch = kBlockN + 8;  // bf16 per staged row: 16 B aligned, no bank conflicts
  static constexpr int kMaxLocalExperts = 512;
  static constexpr int kMaxCounts = 2048;      // P · E_local counts cached in shared memory
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
  // (two half-box loads instead made the producer spill: fp8 interleaved 156 instead of 60 bytes, run38).
  struct NoTma {};
  using TmaLoadAWhole = std::conditional_t<kClusterM == 2, decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{},
                                           cute::take<0, 2>(SmemLayoutA{}), TileShapeA{}, cute::_1{})), NoTma>;
  using TmaLoadBWhole = std::conditional_t<kClusterM == 2, decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{},
                                           cute::take<0, 2>(SmemLayoutB{}), TileShapeB{}, cute::_1{})), NoTma>;
};

template <bool kHalfL2, int kClusterN = 1, int kClusterM = 1>
using MegaMoeFp8Config = MegaMoeConfig<256, cute::float_e4m3_t, kHalfL2, kClusterN, kClusterM>;


template <class C>
struct MegaMoeParams {
  MoeProblem pr;
  SymmetricWindow win;
  char* local = nullptr;                  // this rank's window
  char* peer[kMaxEpRanks] = {};           // every rank's window through LSA (peer[rank] = local)
  int rank = 0;
  int tokens = 0;                         // T_s of this rank in this call
  std::uint32_t epoch = 0;
  int D_rows = 1;                         // interleaved: lead of L1 over L2 (rows)
  int wave_experts = 1;                   // expert-wave: experts per wave
  int wave_lag = 0;                       // expert-wave: λ, waves of L1 before a wave's L2 (scheduler.hpp)
  const float* topk_weights = nullptr;    // [T][k]
  __nv_bfloat16* out = nullptr;           // [T][h]
  WaitContext wait;
  MoeKernelStats* stats = nullptr;        // device, zeroed per call
  // fp8: the 128×128 block scales of W1 and W2 (quantize.hpp's layout, local experts stacked: block row
  // e·(N/128) + b of expert e), fp32 [E_local·N/128][pitch]; null for bf16.
  const float* w1_scales = nullptr;
  const float* w2_scales = nullptr;
  int w1_scale_pitch = 0, w2_scale_pitch = 0;
  typename C::TmaLoadA tma_a1, tma_a2;  // dispatch, ring
  typename C::TmaLoadB tma_b1;          // W1
  typename C::TmaLoadW2 tma_b2;         // W2 (per expert with kHalfL2)
  typename C::TmaLoadAWhole tma_a1_whole, tma_a2_whole;  // mixed pairs only: undivided A and B
  typename C::TmaLoadBWhole tma_b1_whole, tma_b2_whole;
};

template <class C>
struct MegaMoeSharedStorage {
  alignas(1024) cute::array_aligned<typename C::Element, cute::cosize_v<typename C::SmemLayoutA>, 1024> a;
  alignas(1024) cute::array_aligned<typename C::Element, cute::cosize_v<typename C::SmemLayoutB>, 1024> b;
  alignas(16) __nv_bfloat16 staging[C::kStagingSlots][C::kBlockM * C::kStagingPitch];
  typename C::Pipeline::SharedStorage pipeline;
  alignas(8) std::uint64_t staging_full[C::kStagingSlots];
  alignas(8) std::uint64_t staging_empty[C::kStagingSlots];
  int counts[C::kMaxCounts];                // [P][E_local]: pairs source s sends to local expert e
  int first_row[C::kMaxLocalExperts + 1];   // O_e
  std::uint32_t n_row_last[C::kMaxLocalExperts / 32];  // mixed pairs: bit e = expert e's last row is an N-row
  int routing_ok;                           // every source published this call, and its rows fit
};

// The schedule over this launch's instances: one per cluster, on pair tiles when the cluster is a CTA pair.
template <class Schedule, class C>
__device__ __forceinline__ Schedule make_device_schedule(const MegaMoeParams<C>& prm, const int* first_row) {
  const TileStreams streams = ClusterTiling{C::kClusterN}.pair_streams(
      TileStreams{SchedulerRows{first_row, prm.pr.E_local()}, prm.pr.P1_l1_n_blocks(), prm.pr.P2_l2_n_blocks()});
  const int instances = static_cast<int>(gridDim.x) / C::kClusterSize;
  if constexpr (std::is_same_v<Schedule, InterleavedSchedule>) {
    return InterleavedSchedule{streams, prm.D_rows, instances};
  } else {
    return ExpertWaveSchedule{streams, prm.wave_experts, instances, prm.wave_lag};
  }
}

template <class T>
__device__ __forceinline__ T* at(char* base, std::int64_t offset) { return reinterpret_cast<T*>(base + offset); }

// This CTA's tiles in schedule order: `for (TileWalk<Schedule, C> walk(sched, smem); walk.next();) use(walk.tile);`.
// The producer, the storers and the consumers each walk the same sequence, with no shared state; the
// instance is the cluster, and this CTA takes its share of each pair tile: its n-block (N-pairs), or with
// mixed pairs its half of an M-row or its n-block of an N-row (empty pair tiles skipped by both CTAs).
template <class Schedule, class C>
struct TileWalk {
  const Schedule& sched;
  const std::uint32_t* n_row_last;  // mixed pairs: which experts end in an N-row (MegaMoeSharedStorage)
  typename Schedule::State state;
  Tile tile;
  int half = 0;       // the 128-row half of the scheduler row this CTA runs (mixed pairs; else 0)
  bool m_row = true;  // mixed pairs: the pair shares B (an M-row), else A (an N-row)
  __device__ TileWalk(const Schedule& s, const MegaMoeSharedStorage<C>& smem)
      : sched(s), n_row_last(smem.n_row_last), state(s.start(static_cast<int>(blockIdx.x) / C::kClusterSize)) {}
  __device__ bool next() {
    for (;;) {
      const auto step = sched.next(state);
      state = step.next;
      if constexpr (C::kClusterM == 1) {
        tile = ClusterTiling{C::kClusterN}.cta_tile(step.tile, static_cast<int>(blockIdx.x) % C::kClusterN);
        return tile.valid();
      } else {
        if (!step.tile.valid()) {
          tile = step.tile;
          return false;
        }
        const int e = step.tile.expert;
        m_row = step.tile.row + 1 < sched.streams.rows.first_row[e + 1] || !((n_row_last[e / 32] >> (e % 32)) & 1u);
        if (MixedPairTiling::cta_tile(step.tile, static_cast<int>(blockIdx.x) % 2, m_row,
                                      step.tile.stage == Stage::L1 ? sched.streams.P1 : sched.streams.P2, tile, half))
          return true;
      }
    }
  }
  // CTA tiles that finish the L1 (or L2) stage of a scheduler row: what l1_done (l2_done) counts up to. The
  // schedule runs on pair streams (P1 / kClusterN pair tiles per row), the counters count CTA tiles. Mixed
  // pairs run on the plain ring (FusedMoeLayer: one slot per row, generation 0), where the kind of the row
  // alone gives it.
  __device__ std::uint32_t l1_target(int slots) const {
    if constexpr (C::kClusterM == 1)
      return l1_done_target(tile.row, slots, ClusterTiling{C::kClusterN}.cta_tiles_per_row(sched.streams.P1));
    else return MixedPairTiling::cta_tiles_per_row(m_row, sched.streams.P1);
  }
  __device__ int first_row() const { return half * C::kBlockM; }  // of this CTA's rows inside the scheduler row
};

// ---- roles -----------------------------------------------------------------------------------------

template <class Schedule, class C>
__device__ void producer_role(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem, typename C::Pipeline& pipeline) {
  using namespace cute;
  const MoeProblem& pr = prm.pr;
  const SymmetricWindow& w = prm.win;
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
      pipeline.producer_acquire(state);
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
  for (TileWalk<Schedule, C> walk(sched, smem); walk.next();) {
    const Tile t = walk.tile;
    const int slot = w.ring.slot(t.row);
    const long long t0 = clock64();
    if (t.stage == Stage::L1) {
      wait_counter<false>(prm.wait, at<std::uint32_t>(prm.local, w.counters.dispatch_ready(t.row)), pr.b_m,
                          MoeWait::dispatch_ready, t.row);
      // A reused ring slot (not with mixed pairs: they run on the plain ring, see TileWalk::l1_target).
      if (C::kClusterM == 1 && w.ring.generation(t.row) > 0)
        wait_counter<false>(prm.wait, at<std::uint32_t>(prm.local, w.counters.l2_done(slot)),
                            slot_free_target(t.row, w.ring.slots, pr.P2_l2_n_blocks()), MoeWait::l2_done, slot);
      fence_proxy_async_global();
      wait_cycles += clock64() - t0;
      // A in 128-row blocks: block row·kClusterM + half is this CTA's half of the scheduler row.
      load_tile(walk.m_row, prm.tma_a1, mA1, prm.tma_a1_whole, mA1w, t.row * C::kClusterM + walk.half,
                prm.tma_b1, mB1, prm.tma_b1_whole, mB1w, t.expert * pr.P1_l1_n_blocks() + t.n_block);
    } else {
      wait_counter<false>(prm.wait, at<std::uint32_t>(prm.local, w.counters.l1_done(slot)),
                          walk.l1_target(w.ring.slots), MoeWait::l1_done, slot);
      fence_proxy_async_global();
      wait_cycles += clock64() - t0;
      if constexpr (C::kHalfL2)
        load_tile(walk.m_row, prm.tma_a2, mA2, prm.tma_a2_whole, mA2w, slot, prm.tma_b2, mB2(_, _, t.expert), prm.tma_b2_whole, mB2w,
                  t.n_block);
      else
        load_tile(walk.m_row, prm.tma_a2, mA2, prm.tma_a2_whole, mA2w, slot * C::kClusterM + walk.half,
                  prm.tma_b2, mB2, prm.tma_b2_whole, mB2w, t.expert * pr.P2_l2_n_blocks() + t.n_block);
    }
  }
  atomicAdd(&prm.stats->producer_wait_cycles, wait_cycles);
}

// Pulls dispatch rows in units of kDispatchUnitRows consecutive rows of one scheduler row, unit u = g, g + Gs,
// ... in increasing order, so that all CTAs together fill scheduler rows front to back (the order the L1
// stream consumes them) instead of each CTA filling whole rows of its own. Dispatch warp `dw` takes its share
// of each unit's rows: lanes resolve the rows' sources in parallel (remote 4-byte loads), then the whole
// warp copies one row at a time, kDispatchChunks × 16 bytes in flight per lane (fp8: and the row's scales).
template <class C>
__device__ void dispatch_role(const MegaMoeParams<C>& prm, const MegaMoeSharedStorage<C>& smem, int dw) {
  const MoeProblem& pr = prm.pr;
  const SymmetricWindow& w = prm.win;
  const int lane = threadIdx.x % 32, P = pr.P_ranks, EL = pr.E_local(), k = pr.top_k;
  constexpr int kWarpRows = kDispatchUnitRows / C::kDispatchWarps;
  const int units_per_row = pr.b_m / kDispatchUnitRows;
  const int units = smem.first_row[EL] * units_per_row;
  const int chunks = static_cast<int>(w.tokens.row_pitch_bytes / 16);  // 16-byte pieces of one token row
  const SchedulerRows rows{smem.first_row, EL};
  unsigned long long remote_bytes = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int p = u / units_per_row;
    const int e = rows.expert_of_row(p);
    int rows_e = 0;
    for (int s = 0; s < P; ++s) rows_e += smem.counts[s * EL + e];
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
  if (lane == 0 && remote_bytes) atomicAdd(&prm.stats->peer_bytes, remote_bytes);
}

// Storer warp `sw` of kStorerWarps drains the groups of 32 rows b = sw, sw + kStorerWarps, ... of each tile.
template <class Schedule, class C>
__device__ void storer_role(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem, int sw) {
  const MoeProblem& pr = prm.pr;
  const SymmetricWindow& w = prm.win;
  const int lane = threadIdx.x % 32, P = pr.P_ranks;
  constexpr int kLanesPerRow = C::kBlockN / 8;      // 16-byte pieces of one staged row: 16 or 32
  constexpr int kRowsPerStep = 32 / kLanesPerRow;   // rows one warp instruction covers: 2 or 1
  const int piece = lane % kLanesPerRow;
  unsigned long long remote_bytes = 0, drain_cycles = 0;
  const Schedule sched = make_device_schedule<Schedule>(prm, smem.first_row);
  int j = 0;  // this CTA's L2 tiles so far
  for (TileWalk<Schedule, C> walk(sched, smem); walk.next();) {
    const Tile t = walk.tile;
    if (t.stage != Stage::L2) continue;
    const int slot = j % C::kStagingSlots, phase = (j / C::kStagingSlots) & 1;
    cutlass::arch::ClusterBarrier::wait(&smem.staging_full[slot], phase);
    if (sw == 0 && lane == 0) {  // K_act: how many CTAs are draining a tile as this one starts
      const unsigned long long now = atomicAdd(&prm.stats->draining_now, 1ull) + 1;
      atomicAdd(&prm.stats->burst_overlap_sum, now);
      atomicMax(&prm.stats->burst_overlap_max, now);
    }
    // The tile's 128 RowSources, 4 per lane (row 32·b + lane in rs[b]), in one round of loads, so the store
    // loop below has no global loads on its path. Read only now: the staging barrier orders them after
    // this row's dispatch (dispatch_ready -> L1 -> l1_done -> this tile's TMA -> consumers -> staging_full);
    // read earlier they could be the previous call's.
    const RowSource* sources = at<const RowSource>(
        prm.local, w.dispatch.row_source_offset(static_cast<std::int64_t>(t.row) * pr.b_m + walk.first_row()));
    RowSource rs[4] = {};
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // L2, not L1: other SMs wrote them during this kernel
      if (b % C::kStorerWarps != sw) continue;
      const int2 v = __ldcg(reinterpret_cast<const int2*>(sources + 32 * b + lane));
      rs[b] = RowSource{v.x, v.y};
    }
    const __nv_bfloat16* staged = smem.staging[slot];
    const std::int64_t col_bytes = static_cast<std::int64_t>(t.n_block) * C::kBlockN * 2 + piece * 16;
    const int cols = C::kHalfL2 ? pr.l2_block_cols(t.n_block) : C::kBlockN;  // a half-full block: its first 128
    const bool piece_exists = piece * 8 < cols;
    unsigned rows_to[kMaxEpRanks] = {};
    // kRowsPerStep rows per step, 16 bytes per lane: rows 32·b + kRowsPerStep·it + lane / kLanesPerRow.
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      if (b % C::kStorerWarps != sw) continue;
#pragma unroll
      for (int it = 0; it < 32 / kRowsPerStep; ++it) {
        const int r_in = kRowsPerStep * it + lane / kLanesPerRow;  // row within this group of 32
        const int rank = __shfl_sync(0xffffffffu, rs[b].rank, r_in);
        const int pair = __shfl_sync(0xffffffffu, rs[b].pair, r_in);
        if (pair < 0) continue;
        const int r = 32 * b + r_in;
        const uint4 v = *reinterpret_cast<const uint4*>(staged + r * C::kStagingPitch + piece * 8);
        uint4* to = at<uint4>(prm.peer[rank], w.combine.pair_offset(pair) + col_bytes);
        if constexpr (C::kHalfL2) st_global_v4_if(to, v, piece_exists);
        else *to = v;
#pragma unroll
        for (int q = 0; q < kMaxEpRanks; ++q) rows_to[q] += (piece == 0 && rank == q);
      }
    }
    __syncwarp();
    if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&smem.staging_empty[slot]);
    const long long t0 = clock64();
    __threadfence_system();  // this lane's combine stores are visible before the counts are
    __syncwarp();
    drain_cycles += clock64() - t0;
    for (int q = 0; q < P; ++q) {
      unsigned n = rows_to[q];
#pragma unroll
      for (int o = 16; o > 0; o /= 2) n += __shfl_xor_sync(0xffffffffu, n, o);
      if (lane == 0 && n > 0) {
        red_release_sys_add(at<std::uint32_t>(prm.peer[q], w.counters.combine_arrived()), n);
        if (q != prm.rank) remote_bytes += static_cast<unsigned long long>(n) * cols * 2;
      }
    }
    if (lane == 0 && sw == 0) {
      red_release_gpu_add(at<std::uint32_t>(prm.local, w.counters.l2_done(w.ring.slot(t.row))), 1);
      atomicAdd(&prm.stats->draining_now, ~0ull);  // this CTA's drain is over (its own storer 1 may lag a little)
    }
    ++j;
  }
  if (lane == 0) {
    if (remote_bytes) atomicAdd(&prm.stats->peer_bytes, remote_bytes);
    atomicAdd(&prm.stats->storer_drain_cycles, drain_cycles);
  }
}

// fp8: scales of one 128-wide K block for this thread's two accumulator rows (r0, r0 + 8) and both
// 128-column halves of the tile (A: 1×128 per row, B: 128×128 per half).
struct Fp8BlockScales {
  float a0 = 1, a1 = 1, b0 = 1, b1 = 1;
};

// Where a tile's fp8 scales live: A's of K block kb for row r0 at a[kb · a_kb_stride] (row r0 + 8 eight
// floats later), B's of half h at b[h · b_pitch + kb]; half 1 does not exist in a half-full last L2 block.
struct Fp8ScaleSource {
  const float* a;
  std::int64_t a_kb_stride;
  const float* b;
  int b_pitch;
  bool half1;
  // A's scales were written during this kernel by other SMs: read them from L2, and only after this tile's
  // first stage has arrived (which orders them after the counter the producer acquired).
  // `with_half1`: half1, or a compile-time true where no block is half full.
  __device__ __forceinline__ Fp8BlockScales load(int kb, bool with_half1) const {
    return Fp8BlockScales{__ldcg(a + kb * a_kb_stride), __ldcg(a + kb * a_kb_stride + 8), __ldg(b + kb),
                          with_half1 ? __ldg(b + b_pitch + kb) : 0.0f};
  }
};

template <class Schedule, class C>
__device__ void consumer_role(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem, typename C::Pipeline& pipeline, int tid) {
  using namespace cute;
  const MoeProblem& pr = prm.pr;
  const SymmetricWindow& w = prm.win;
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
  for (TileWalk<Schedule, C> walk(sched, smem); walk.next();) {
    const Tile t = walk.tile;
    const int cta_row0 = walk.first_row();  // this CTA's rows inside the scheduler row (mixed pairs: 0 or 128)
    const int k_blocks = (t.stage == Stage::L1 ? pr.h_hidden : pr.h_inter) / C::kBlockK;
    if (first_start < 0) {
      first_start = clock64();
      if (tid == 0) {
        first_start_ns = global_timer_ns();
        atomicMax(&prm.stats->first_tile_not_ns, ~first_start_ns);
      }
    }
    if constexpr (!C::kFp8) {
      // Mainloop: one wgmma batch per k-block, one batch in flight while the next stage is awaited.
      typename C::Pipeline::PipelineState previous = state;
      for (int kb = 0; kb < k_blocks; ++kb) {
        pipeline.consumer_wait(state);
        auto a_stage = tCrA(_, _, _, state.index());
        if (kb == 0) {
          wgmma_batch<true, -1, false>(mma, a_stage, tCrB(_, _, _, state.index()), acc);
        } else {
          wgmma_batch<false, -1, false>(mma, a_stage, tCrB(_, _, _, state.index()), acc);
        }
        warpgroup_wait<1>();
        if (kb > 0) pipeline.consumer_release(previous);
        previous = state;
        ++state;
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc);
      pipeline.consumer_release(previous);
    } else {
      // Mainloop, fp8: per 128-wide K block and per half, the block's sum into tmp, then
      // acc += tmp · fp32(scale_a · scale_b). The next block's scales load while this one multiplies.
      const Fp8ScaleSource src =
          t.stage == Stage::L1
              ? Fp8ScaleSource{at<const float>(prm.local, w.dispatch.scale_offset(static_cast<std::int64_t>(t.row) * pr.b_m + cta_row0 + r0, 0)),
                               w.dispatch.capacity_rows,
                               prm.w1_scales + static_cast<std::int64_t>(t.expert * pr.P1_l1_n_blocks() + t.n_block) * 2 * prm.w1_scale_pitch,
                               prm.w1_scale_pitch, true}
              : Fp8ScaleSource{at<const float>(prm.local, w.ring.scale_offset(t.row, cta_row0 + r0, 0)),
                               static_cast<std::int64_t>(w.ring.slots) * pr.b_m,
                               prm.w2_scales + (static_cast<std::int64_t>(t.expert) * (pr.h_hidden / kScaleBlock) + 2 * t.n_block) * prm.w2_scale_pitch,
                               prm.w2_scale_pitch, !C::kHalfL2 || pr.l2_block_cols(t.n_block) > C::kMmaN};
#pragma unroll
      for (int v = 0; v < kAcc; ++v) acc(v) = 0.0f;
      const bool half1 = !C::kHalfL2 || src.half1;
      Fp8BlockScales next{};
      // acc[half] += tmp · fp32(scale_a(row) · b), the half a compile-time constant (a runtime one would turn
      // the accumulator's register indices into selects).
      auto promote = [&](auto half, const Fp8BlockScales& sc, float b) {
        constexpr int base = decltype(half)::value * (kAcc / 2);
        const float p0 = sc.a0 * b, p1 = sc.a1 * b;
#pragma unroll
        for (int v = 0; v < kAcc / 2; ++v) acc(base + v) = fmaf(tmp(v), (v & 2) ? p1 : p0, acc(base + v));
      };
      for (int kb = 0; kb < k_blocks; ++kb) {
        pipeline.consumer_wait(state);
        const int stage = state.index();
        auto a_stage = tCrA(_, _, _, stage);
        wgmma_batch<true, -1, false>(mma, a_stage, tCrB(_, _, _, 2 * stage), tmp);
        const Fp8BlockScales sc = kb == 0 ? src.load(0, half1) : next;
        if (kb + 1 < k_blocks) next = src.load(kb + 1, half1);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tmp);
        if (!half1) pipeline.consumer_release(state);  // a half-full last L2 block: half 1 is TMA's zero fill
        promote(Int<0>{}, sc, sc.b0);
        if (half1) {
          wgmma_batch<true, -1, false>(mma, a_stage, tCrB(_, _, _, 2 * stage + 1), tmp);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tmp);
          pipeline.consumer_release(state);
          promote(Int<1>{}, sc, sc.b1);
        }
        ++state;
      }
    }

    if (t.stage == Stage::L1) {
      if constexpr (!C::kFp8) {
        // act = silu(gate) · up, bf16, into ring columns [n·b_n/2, (n+1)·b_n/2) of row block p.
        __nv_bfloat16* ring = at<__nv_bfloat16>(prm.local, w.ring.l1_tile_offset(t.row, t.n_block) + cta_row0 * w.ring.row_pitch_bytes);
        const std::int64_t pitch = pr.h_inter;
#pragma unroll
        for (int v = 0; v < kAcc / 2; v += 2) {
          const int r = get<0>(tCcC(v)), c = get<1>(tCcC(v));
          const float g0 = acc(v), g1 = acc(v + 1), u0 = acc(v + kAcc / 2), u1 = acc(v + 1 + kAcc / 2);
          const float a0 = g0 / (1.0f + __expf(-g0)) * u0, a1 = g1 / (1.0f + __expf(-g1)) * u1;
          *reinterpret_cast<__nv_bfloat162*>(ring + r * pitch + c) = __floats2bfloat162_rn(a0, a1);
        }
      } else {
        // act = silu(gate) · up in fp32; this tile's 128 act columns are activation block n of each row:
        // amax over the row's quad of threads, then codes into the ring and one scale per row.
        float amax[2] = {0.0f, 0.0f};
#pragma unroll
        for (int v = 0; v < kAcc / 2; ++v) {
          const float g = acc(v), u = acc(v + kAcc / 2);
          acc(v) = g / (1.0f + __expf(-g)) * u;
          amax[(v >> 1) & 1] = fmaxf(amax[(v >> 1) & 1], fabsf(acc(v)));
        }
#pragma unroll
        for (int rh = 0; rh < 2; ++rh)
          for (int o = 1; o < 4; o *= 2) amax[rh] = fmaxf(amax[rh], __shfl_xor_sync(0xffffffffu, amax[rh], o));
        const fp8::BlockScale scale[2] = {fp8::block_scale(amax[0]), fp8::block_scale(amax[1])};
        std::uint8_t* ring = at<std::uint8_t>(prm.local, w.ring.l1_tile_offset(t.row, t.n_block) + cta_row0 * w.ring.row_pitch_bytes);
        const std::int64_t pitch = pr.h_inter;
#pragma unroll
        for (int v = 0; v < kAcc / 2; v += 2) {
          const int r = get<0>(tCcC(v)), c = get<1>(tCcC(v));
          const fp8::BlockScale& sv = scale[(v >> 1) & 1];
          const unsigned lo = fp8::quantize_value(acc(v), sv), hi = fp8::quantize_value(acc(v + 1), sv);
          *reinterpret_cast<std::uint16_t*>(ring + r * pitch + c) = static_cast<std::uint16_t>(lo | (hi << 8));
        }
        if (tid % 4 == 0) {
          *at<float>(prm.local, w.ring.scale_offset(t.row, cta_row0 + r0, t.n_block)) = scale[0].scale;
          *at<float>(prm.local, w.ring.scale_offset(t.row, cta_row0 + r0 + 8, t.n_block)) = scale[1].scale;
        }
      }
      fence_proxy_async_global();
      __threadfence();
      cutlass::arch::NamedBarrier::sync(C::kConsumerThreads, 1);
      if (tid == 0) red_release_gpu_add(at<std::uint32_t>(prm.local, w.counters.l1_done(w.ring.slot(t.row))), 1);
      ++l1_tiles;
    } else {
      const int slot = j % C::kStagingSlots, phase = (j / C::kStagingSlots) & 1;
      const long long t0 = clock64();
      cutlass::arch::ClusterBarrier::wait(&smem.staging_empty[slot], phase ^ 1);
      staging_wait += clock64() - t0;
      __nv_bfloat16* staged = smem.staging[slot];
#pragma unroll
      for (int v = 0; v < kAcc; v += 2) {
        const int r = get<0>(tCcC(v)), c = get<1>(tCcC(v));
        *reinterpret_cast<__nv_bfloat162*>(staged + r * C::kStagingPitch + c) = __floats2bfloat162_rn(acc(v), acc(v + 1));
      }
      cutlass::arch::ClusterBarrier::arrive(&smem.staging_full[slot]);
      ++j;
    }
    last_end = clock64();
  }
  if (tid == 0) {
    if (first_start >= 0) {
      atomicAdd(&prm.stats->consumer_cycles, static_cast<unsigned long long>(last_end - first_start));
      const unsigned long long end_ns = global_timer_ns();
      atomicAdd(&prm.stats->consumer_ns, end_ns - first_start_ns);
      atomicMax(&prm.stats->last_tile_end_ns, end_ns);
      atomicMax(&prm.stats->first_cta_done_not_ns, ~end_ns);
    }
    atomicAdd(&prm.stats->staging_wait_cycles, staging_wait);
    atomicAdd(&prm.stats->l1_tiles, static_cast<unsigned long long>(l1_tiles));
    atomicAdd(&prm.stats->l2_tiles, static_cast<unsigned long long>(j));
  }
}

// out[t] = Σ_j w[t][j] · combine[t][j] (fp32, j in order). One 16-byte column chunk of one token per thread,
// the grid's threads striding over all (token, chunk) pairs, so every thread has work and neighbouring
// threads read neighbouring bytes; kRowsInFlight of the token's k rows are loaded before any is summed (a
// bandwidth pass over T·k·h·2 bytes: it needs many loads in flight). The sum order is j = 0, 1, ... whatever
// kRowsInFlight is, so every thread's result is the same.
template <int kRowsInFlight, class C>
__device__ void reduce_role(const MegaMoeParams<C>& prm) {
  const MoeProblem& pr = prm.pr;
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
          v[j] = __ldcg(at<const uint4>(prm.local, prm.win.combine.row_offset(t, j0 + j)) + c);
          wt[j] = prm.topk_weights[static_cast<std::int64_t>(t) * k + j0 + j];
        }
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j)
        if (j0 + j < k) accumulate_bf16x8(sum, wt[j], v[j]);
    }
    reinterpret_cast<uint4*>(prm.out + static_cast<std::int64_t>(t) * pr.h_hidden)[c] = pack_bf16x8(sum);
  }
}

// Step 4 of the kernel, called by every thread after its role: wait until every owner has stored
// every row of this rank's tokens (combine_arrived), then this thread's share of the top-k reduction.
// Returns when the wait began (thread 0's tail statistic).
inline constexpr int kRolesDoneBarrier = 2;  // named barrier of all 384 threads (1: the consumers' L1 epilogue)
template <int kRowsInFlight, class C>
__device__ long long await_combine_then_reduce(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem) {
  // A CTA pair: the partner's consumers may still be arriving on this CTA's empty barriers, so neither
  // leaves the cluster's shared memory before both are done with it.
  if constexpr (C::kClusterSize > 1) cute::cluster_sync();
  else cutlass::arch::NamedBarrier::sync(C::kThreads, kRolesDoneBarrier);
  const long long tail_start = clock64();
  if (threadIdx.x == 0 && smem.routing_ok)
    smem.routing_ok = wait_counter<true>(prm.wait, at<const std::uint32_t>(prm.local, prm.win.counters.combine_arrived()),
                                         static_cast<std::uint32_t>(prm.tokens) * prm.pr.top_k * prm.pr.P2_l2_n_blocks(),
                                         MoeWait::combine_arrived, -1);
  cutlass::arch::NamedBarrier::sync(C::kThreads, kRolesDoneBarrier);
  if (smem.routing_ok) reduce_role<kRowsInFlight>(prm);  // else the output stays as it was; finish() reports it
  return tail_start;
}

// ---- the kernel ------------------------------------------------------------------------------------

template <class Schedule, class C>
__global__ void __launch_bounds__(C::kThreads, 1) megamoe_kernel(CUTE_GRID_CONSTANT MegaMoeParams<C> const prm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) char smem_raw[];
  MegaMoeSharedStorage<C>& smem = *reinterpret_cast<MegaMoeSharedStorage<C>*>(smem_raw);
  const MoeProblem& pr = prm.pr;
  const SymmetricWindow& w = prm.win;
  const int P = pr.P_ranks, EL = pr.E_local();

  // 1. Publish this call (CTA 0) and wait until every source has published its own.
  if (threadIdx.x == 0) {
    atomicMax(&prm.stats->kernel_start_not_ns, ~static_cast<unsigned long long>(global_timer_ns()));
    if (blockIdx.x == 0) {
      __threadfence_system();
      st_release_sys(at<std::uint32_t>(prm.local, w.epochs.send_ready()), prm.epoch);
    }
    bool ok = true;
    for (int s = 0; s < P && ok; ++s)
      ok = wait_counter<true>(prm.wait, at<const std::uint32_t>(prm.peer[s], w.epochs.send_ready()), prm.epoch,
                              MoeWait::peer_send_ready, s);
    smem.routing_ok = ok;
    cute::prefetch_tma_descriptor(prm.tma_a1.get_tma_descriptor());
    cute::prefetch_tma_descriptor(prm.tma_b1.get_tma_descriptor());
    cute::prefetch_tma_descriptor(prm.tma_a2.get_tma_descriptor());
    cute::prefetch_tma_descriptor(prm.tma_b2.get_tma_descriptor());
    if constexpr (C::kClusterM == 2) {
      cute::prefetch_tma_descriptor(prm.tma_a1_whole.get_tma_descriptor());
      cute::prefetch_tma_descriptor(prm.tma_b1_whole.get_tma_descriptor());
      cute::prefetch_tma_descriptor(prm.tma_a2_whole.get_tma_descriptor());
      cute::prefetch_tma_descriptor(prm.tma_b2_whole.get_tma_descriptor());
    }
  }
  __syncthreads();
  // 2. Counts of every source for the local experts, and the scheduler rows O_e.
  // A source that never published (the wait failed) leaves the routing unknown: no rows, no tiles.
  for (int i = threadIdx.x; i < P * EL; i += blockDim.x)
    smem.counts[i] = smem.routing_ok ? ld_relaxed_sys(at<const int>(prm.peer[i / EL], w.send.count_offset(pr.global_expert(prm.rank, i % EL)))) : 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::int64_t acc = 0;
    for (int e = 0; e < C::kMaxLocalExperts / 32; ++e) smem.n_row_last[e] = 0;
    for (int e = 0; e < EL; ++e) {
      smem.first_row[e] = static_cast<int>(acc);
      std::int64_t rows = 0;
      for (int s = 0; s < P; ++s) rows += smem.counts[s * EL + e];
      const int rows_e = static_cast<int>(rows < (1 << 30) ? rows : (1 << 30)), blocks = m_blocks(rows_e, pr.b_m);
      acc += blocks;
      if (C::kClusterM == 2 && blocks > 0 && !MixedPairTiling::m_row(rows_e, blocks - 1)) smem.n_row_last[e / 32] |= 1u << (e % 32);
    }
    smem.first_row[EL] = static_cast<int>(acc);
    if (!w.dispatch.fits(acc * pr.b_m)) {
      moe_device_fail(prm.wait, MoeWait::capacity, -1, static_cast<std::uint32_t>(acc * pr.b_m),
                      static_cast<std::uint32_t>(w.dispatch.capacity_rows));
      for (int e = 0; e <= EL; ++e) smem.first_row[e] = 0;  // run nothing rather than write out of bounds
      smem.routing_ok = 0;
    }
    for (int slot = 0; slot < C::kStagingSlots; ++slot) {
      cutlass::arch::ClusterBarrier::init(&smem.staging_full[slot], C::kConsumerThreads);
      cutlass::arch::ClusterBarrier::init(&smem.staging_empty[slot], C::kStorerWarps);
    }
  }
  typename C::Pipeline::Params pipeline_params;
  pipeline_params.transaction_bytes = C::kStageBytes;
  pipeline_params.role = threadIdx.x < 128 ? C::Pipeline::ThreadCategory::Producer : C::Pipeline::ThreadCategory::Consumer;
  pipeline_params.is_leader = threadIdx.x == 0;
  pipeline_params.num_consumers = C::kConsumerThreads;
  typename C::Pipeline pipeline(smem.pipeline, pipeline_params, typename C::ClusterShape{});
  cutlass::arch::fence_barrier_init();
  if constexpr (C::kClusterSize > 1) {
    // A CTA pair arrives on, and multicasts into, the other CTA's barriers: both must be initialised first.
    // And both must run the same tiles, or one waits forever for the other's half of A: if either CTA lost
    // the routing (a peer's send_ready wait timed out in one CTA but not the other), neither runs any.
    cute::cluster_sync();
    if (threadIdx.x == 0 && smem.routing_ok && !ld_shared_cluster(&smem.routing_ok, cute::block_rank_in_cluster() ^ 1u)) {
      smem.routing_ok = 0;
      for (int e = 0; e <= EL; ++e) smem.first_row[e] = 0;
    }
    __syncthreads();
  } else {
    __syncthreads();
  }

  // 3. Roles, then 4. the top-k reduction. The reduction code follows both warpgroups' branches, so it is
  // compiled for the smaller setmaxnreg budget (warpgroup 0's 56 or 72 registers): 4 rows in flight, which
  // fit. Measured alternatives (results/h200x2/moe/run24-pairs, run27-reduction-registers): 8 rows in
  // flight made the tail 2x longer; handing registers back with setmaxnreg before it made compute-sanitizer
  // racecheck run past its bound; a reduction inside each branch made ptxas spill more in the fp8 kernels
  // (8.9 vs 7.7 ms).
  const int warp = threadIdx.x / 32;
  if (warp < 4) {
    cutlass::arch::warpgroup_reg_dealloc<C::kProducerRegisters>();
    if (warp == 0) {
      if (threadIdx.x == 0) producer_role<Schedule>(prm, smem, pipeline);
    } else if (warp <= C::kDispatchWarps) {
      dispatch_role(prm, smem, warp - 1);
    } else {
      storer_role<Schedule>(prm, smem, warp - 1 - C::kDispatchWarps);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<C::kConsumerRegisters>();
    consumer_role<Schedule>(prm, smem, pipeline, threadIdx.x - 128);
  }
  const long long tail_start = await_combine_then_reduce<4>(prm, smem);

  // 5. The last CTA tells every peer that this rank has finished reading its data of this call.
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&prm.stats->tail_cycles, static_cast<unsigned long long>(clock64() - tail_start));
    atomicMax(&prm.stats->kernel_end_ns, static_cast<unsigned long long>(global_timer_ns()));
    __threadfence();
    if (atomicAdd(at<std::uint32_t>(prm.local, w.counters.ctas_finished()), 1u) == gridDim.x - 1) {
      __threadfence_system();
      for (int s = 0; s < P; ++s)
        if (s != prm.rank) st_release_sys(at<std::uint32_t>(prm.peer[s], w.epochs.peer_finished(prm.rank)), prm.epoch);
    }
  }
#endif
}

}  // namespace xstage::moe
