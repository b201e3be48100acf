// The forward mainloop on Hopper: a TMA producer and 2 or 3 wgmma consumer warpgroups.
//
// Producer (warp 0 of warpgroup 0; its lane 0 issues every TMA load and barrier arrival), per tile:
//   K[n_last] -> (wait Q empty) Q -> { K[n-1], V[n] } for n = n_last .. 1 -> V[0]
// On the Ulysses path that hides both all-to-alls (Params::inputs set), Q, K and V arrive while the kernel runs:
// before each TMA load of Q or K (V's rows are K's) the producer waits, bounded, for the arrival flags of the
// input chunks of the tile's head those rows lie in (ulysses/layout.hpp's InputChunks), remembering for its current
// (batch, head) which chunks it has seen. A tile's first wait reads every flag of its head at once, one or two
// flags per lane gathered by a ballot: one round trip to the L2. (One thread reading them, eight loads at a time
// within the producer's 24 registers, took ~10 us per tile, which the consumers waited for: 6% of the kernel.)
// A Q tile or K/V block that lies within the rank's own sequence shard is loaded from the rank's own input instead,
// with no wait (InputArrivals::own_q, ulysses/layout.hpp's InPlaceRows): those rows are never pushed.
// into a K pipeline and a V pipeline (kStages slots each, mbarrier full/empty pairs, CUTLASS
// PipelineTmaAsync) and one Q slot (q_full: TMA transaction barrier; q_empty: every consumer thread
// arrives once its last S = Q K^T of the tile has completed, so the next tile's Q loads during this
// tile's last P V and epilogue).
//
// A unit of the split tail (key_split.hpp) walks key blocks [begin, end) of its tile the same way, from end - 1.
//
// Consumers (warpgroups 1..n, n = 2 or 3, 64 query rows each), per tile, key blocks from last to first
// (the last block is the only partial one: its masked columns are set to -inf in the first step, and no
// later block needs a check). The last block is that of the tile's own key length where per-batch lengths are
// given (FlashFwdArgs::seqlen_k_per_batch; producer and consumers read it once per tile): blocks past it are
// never loaded.
//   S = Q K[n_last]^T; softmax -> P
//   for each further block n:  issue S = Q K[n]^T, issue O += P V[n+1]      (two wgmma batches in flight)
//                              wait for S; softmax(S) overlaps the P V wgmma    (intra-warpgroup overlap)
//                              wait for P V; rescale O; P <- S
//   O += P V[0]
// The warpgroups take turns issuing their wgmma batches (named barriers, strict round-robin: a ping-pong
// for two) so that one warpgroup's softmax runs while another's matrix products occupy the tensor cores.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "attention/flash_fwd_params.hpp"
#include "common/sm90_wgmma.cuh"
#include "attention/flash_fwd_tile_config.hpp"
#include "attention/key_split.hpp"
#include "attention/named_barriers.hpp"
#include "attention/softmax.hpp"
#include "attention/tile_scheduler.hpp"
#include "attention/ulysses/destinations.hpp"
#if defined(__CUDACC__)
#include "comm/device/bounded_wait.cuh"
#include "comm/device/call_epoch.cuh"
#endif

namespace xstage::attention {

// Global-memory view of one bf16 [batch, seq, heads, head_dim] tensor as CuTe sees it:
// shape (seq, head_dim, heads, batch), head_dim contiguous.
using GmemShapeBmhd = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
using GmemStrideBmhd = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;

// The TMA store of one b_m × d output tile from the configuration's swizzled O staging buffer into such a view
// (both epilogues: the plain one into local O, the all-to-all one into each rank's window).
template <class Config>
using TmaStoreOBmhd = decltype(cute::make_tma_copy(
    cute::SM90_TMA_STORE{},
    cute::make_tensor(cute::make_gmem_ptr(static_cast<typename Config::Element*>(nullptr)), GmemShapeBmhd{}, GmemStrideBmhd{}),
    typename Config::SmemLayoutO{}, cute::Shape<cute::Int<Config::kBlockM>, cute::Int<Config::kHeadDim>>{}, cute::_1{}));

template <class T>
auto make_gmem_bmhd(T* ptr, int seqlen, int head_dim, int heads, int batch, BmhdStrides s) {
  using namespace cute;
  return make_tensor(make_gmem_ptr(ptr), make_layout(make_shape(seqlen, head_dim, heads, batch),
                                                     make_stride(s.row, _1{}, s.head, s.batch)));
}

// kOwnRowsInPlace: fused_both's kernel, whose rank reads its own rows in place (Params::tma_q_own); the others compile
// without that path (the plain and fused_post kernels are the same machine code as before it existed).
template <class Config, bool kOwnRowsInPlace>
struct MainloopSm90 {
  using Element = typename Config::Element;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kStages = Config::kStages;
  using SmemLayoutQ = typename Config::SmemLayoutQ;
  using SmemLayoutKV = typename Config::SmemLayoutKV;
  using SmemLayoutVt = typename Config::SmemLayoutVt;
  using TiledMmaQK = typename Config::TiledMmaQK;
  using TiledMmaPV = typename Config::TiledMmaPV;

  using Turns = IssueTurns<Config::kNumMmaWarpGroups>;
  using PipelineKV = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename PipelineKV::PipelineState;

  using TileShapeQ = cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>;
  using TileShapeKV = cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>;
  using TmaLoadQ = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShapeBmhd{},
                        GmemStrideBmhd{}),
      SmemLayoutQ{}, TileShapeQ{}, cute::_1{}));
  using TmaLoadKV = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShapeBmhd{},
                        GmemStrideBmhd{}),
      cute::take<0, 2>(SmemLayoutKV{}), TileShapeKV{}, cute::_1{}));

  struct Params {
    TmaLoadQ tma_q;
    TmaLoadKV tma_k;
    TmaLoadKV tma_v;
    // The rank's own rows where they lie (fused_both, InputArrivals::own_q): Q, K, V over its sequence-sharded input,
    // its Ms rows of its own heads. Without them, the same tensors as above (never read).
    TmaLoadQ tma_q_own;
    TmaLoadKV tma_k_own;
    TmaLoadKV tma_v_own;
    int seqlen_q, seqlen_k, heads, batch;
    float softmax_scale;
    const int32_t* seqlen_k_per_batch;  // nullptr: every sequence attends to all seqlen_k keys
    InputArrivals inputs;
  };

  // The producer's memory of which input chunks have arrived in this call (InputArrivals).
  struct InputWaits {
    int batch = -1, head = -1;
    std::uint64_t arrived = 0;  // bit i: chunk i of (`batch`, `head`)
  };

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, 1024> k;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, 1024> v;
    typename PipelineKV::SharedStorage pipeline_k;
    typename PipelineKV::SharedStorage pipeline_v;
    alignas(8) uint64_t q_full;
    alignas(8) uint64_t q_empty;
  };

  static Params make_params(FlashFwdArgs const& args, InputArrivals const& inputs = {}) {
    using namespace cute;
    const FlashFwdProblem& p = args.problem;
    auto mQ = make_gmem_bmhd(static_cast<Element const*>(args.q), p.seqlen_q, kHeadDim, p.heads, p.batch, p.q);
    auto mK = make_gmem_bmhd(static_cast<Element const*>(args.k), p.seqlen_k, kHeadDim, p.heads, p.batch, p.k);
    auto mV = make_gmem_bmhd(static_cast<Element const*>(args.v), p.seqlen_k, kHeadDim, p.heads, p.batch, p.v);
    const bool own = inputs.own_q != nullptr;
    const int own_rows = own ? inputs.in_place.shard_rows : p.seqlen_q;
    const BmhdStrides os = inputs.own_strides;
    auto own_or = [&](const void* own_ptr, const void* ptr, BmhdStrides s) {
      return make_gmem_bmhd(static_cast<Element const*>(own ? own_ptr : ptr), own_rows, kHeadDim, p.heads, p.batch, own ? os : s);
    };
    auto mQo = own_or(inputs.own_q, args.q, p.q);
    auto mKo = own_or(inputs.own_k, args.k, p.k);
    auto mVo = own_or(inputs.own_v, args.v, p.v);
    return {make_tma_copy(SM90_TMA_LOAD{}, mQ, SmemLayoutQ{}, TileShapeQ{}, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(SmemLayoutKV{}), TileShapeKV{}, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mV, take<0, 2>(SmemLayoutKV{}), TileShapeKV{}, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mQo, SmemLayoutQ{}, TileShapeQ{}, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mKo, take<0, 2>(SmemLayoutKV{}), TileShapeKV{}, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mVo, take<0, 2>(SmemLayoutKV{}), TileShapeKV{}, _1{}),
            p.seqlen_q, p.seqlen_k, p.heads, p.batch, p.softmax_scale, args.seqlen_k_per_batch, inputs};
  }

  // The Q tiles (b_m rows) or K/V blocks (b_n rows) read from the rank's own input (InPlaceRows::blocks_within).
  CUTE_DEVICE static InPlaceRows::Blocks in_place(Params const& params, int rows) {
    if constexpr (!kOwnRowsInPlace) return {};
    const InputArrivals& in = params.inputs;
    return in.own_q != nullptr ? in.in_place.blocks_within(in.rank, rows) : InPlaceRows::Blocks{};
  }

  // The chunks of head h of batch b whose flags have reached their targets (bit j·per_source + k: chunk k from rank
  // j), read by the whole producer warp at once: lane l reads flags l and l + 32 (relaxed loads, then an acquire
  // fence) and a ballot gathers them. Every lane returns the same mask.
  template <bool kSystem>
  CUTE_DEVICE static std::uint64_t arrived_chunks(InputArrivals const& in, int b, int h) {
    static_assert(kMaxInputChunksPerBatch <= 64, "two flags per lane");
    const InputChunks& c = in.chunks;
    const std::uint32_t* flags = in.flags + c.flag(b, h, 0);
    const int n = c.ranks * c.per_source, lane = cutlass::canonical_lane_idx();
    bool seen[2];
    CUTE_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int i = lane + 32 * half;
      seen[half] = false;
      if (i < n) {
        const std::uint32_t v = kSystem ? comm::ld_relaxed_sys(flags + i) : comm::ld_relaxed_gpu(flags + i);
        seen[half] = static_cast<std::int32_t>(v - c.arrival_target(i % c.per_source)) >= 0;
      }
    }
    if (kSystem) comm::fence_acq_rel_sys();
    else comm::fence_acq_rel_gpu();
    return __ballot_sync(0xffffffffu, seen[0]) | (std::uint64_t{__ballot_sync(0xffffffffu, seen[1])} << 32);
  }

  // Waits until rows [m0, m1) of head h of batch b have arrived (nothing to do without InputArrivals). Called by every
  // lane of the producer warp, which all take the same path (the mask is the ballot's). A wait that times out has
  // recorded why and raised the op's abort flag; the producer goes on loading (what the buffers hold), so the kernel
  // ends and the host's poll() reports the timeout.
  CUTE_DEVICE static void wait_for_rows(Params const& params, InputWaits& w, TileCoord tile, int m0, int m1) {
    const InputArrivals& in = params.inputs;
    if (in.flags == nullptr) return;
    const int b = tile.batch;
    if (b != w.batch || tile.head != w.head) {
      w.batch = b;
      w.head = tile.head;
      w.arrived = kOwnRowsInPlace ? in.in_place_chunks : 0;  // never pushed: read where they lie
    }
    // Once every chunk of the tile's head has been seen, one compare per load instead of the chunk arithmetic below
    // per K block (the gated kernel 815 -> 803 us in Nsight Compute at 4 heads x 16384 x 128).
    if (w.arrived == in.chunks.all_chunks()) return;
    bool waited = false, scanned = false;
    for (int m = m0; m < m1; m = in.chunks.next_chunk_row(m)) {
      const int i = in.chunks.index_of_row(m);
      if ((w.arrived >> i) & 1u) continue;
      if (!scanned) {
        w.arrived |= in.system_scope ? arrived_chunks<true>(in, b, tile.head) : arrived_chunks<false>(in, b, tile.head);
        scanned = waited = true;
        if ((w.arrived >> i) & 1u) continue;
      }
      const int index = in.chunks.flag(b, tile.head, i), what = static_cast<int>(UlyssesWait::inputs);
      const std::uint32_t* flag = in.flags + index;
      if (in.system_scope) comm::wait_counter<true>(in.wait, flag, in.target(i), what, index);
      else comm::wait_counter<false>(in.wait, flag, in.target(i), what, index);
      w.arrived |= std::uint64_t{1} << i;
      waited = true;
    }
    if (waited) comm::fence_proxy_async_global();  // the acquire above before the TMA loads below
  }

  // The keys the tile's sequence attends to.
  CUTE_DEVICE static int tile_seqlen_k(Params const& params, TileCoord tile) {
    if (params.seqlen_k_per_batch == nullptr) return params.seqlen_k;
    return clamp_seqlen_k(params.seqlen_k_per_batch[tile.batch], params.seqlen_k);
  }

  CUTE_DEVICE static void prefetch_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
    if (kOwnRowsInPlace && params.inputs.own_q != nullptr) {
      cute::prefetch_tma_descriptor(params.tma_q_own.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_k_own.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_v_own.get_tma_descriptor());
    }
  }

  // Called by one thread before the CTA-wide barrier that follows pipeline construction.
  CUTE_DEVICE static void init_q_barriers(SharedStorage& smem) {
    cutlass::arch::ClusterTransactionBarrier::init(&smem.q_full, 1);
    cutlass::arch::ClusterBarrier::init(&smem.q_empty, Config::kNumMmaThreads);
  }

  // ---------------------------------------------------------------------------------------------
  // Producer: the 32 lanes of warp 0 walk the loads together (the waits and the pipelines' acquires); lane 0, the
  // pipelines' leader, issues the TMA loads and Q's barrier arrival. `tile_iteration` counts this CTA's tiles (0 for
  // its first).
  CUTE_DEVICE static void load(Params const& params, SharedStorage& smem, PipelineKV& pipeline_k,
                               PipelineKV& pipeline_v, PipelineState& k_state, PipelineState& v_state,
                               TileCoord tile, int tile_iteration, InputWaits& waits, KeyBlocks keys = {}) {
    using namespace cute;
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), SmemLayoutKV{});

    Tensor mQ = params.tma_q.get_tma_tensor(make_shape(params.seqlen_q, int(kHeadDim), params.heads, params.batch));
    Tensor mK = params.tma_k.get_tma_tensor(make_shape(params.seqlen_k, int(kHeadDim), params.heads, params.batch));
    Tensor mV = params.tma_v.get_tma_tensor(make_shape(params.seqlen_k, int(kHeadDim), params.heads, params.batch));
    Tensor gQ = local_tile(mQ(_, _, tile.head, tile.batch), TileShapeQ{}, make_coord(tile.m_block, _0{}));
    Tensor gK = local_tile(mK(_, _, tile.head, tile.batch), TileShapeKV{}, make_coord(_, _0{}));  // (bN, d, n)
    Tensor gV = local_tile(mV(_, _, tile.head, tile.batch), TileShapeKV{}, make_coord(_, _0{}));

    auto [tQgQ, tQsQ] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    auto [tKgK, tKsK] = tma_partition(params.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(params.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    // The same tiles in the rank's own input, whose row 0 is sequence row own_first (Params::tma_q_own).
    const int own_first = params.inputs.in_place.first(params.inputs.rank), own_rows = params.inputs.in_place.shard_rows;
    auto own_rows_of = [&](auto const& tma) {
      Tensor m = tma.get_tma_tensor(make_shape(own_rows, int(kHeadDim), params.heads, params.batch));
      return domain_offset(make_coord(-own_first, _0{}), m(_, _, tile.head, tile.batch));
    };
    Tensor gQo = local_tile(own_rows_of(params.tma_q_own), TileShapeQ{}, make_coord(tile.m_block, _0{}));
    Tensor gKo = local_tile(own_rows_of(params.tma_k_own), TileShapeKV{}, make_coord(_, _0{}));
    Tensor gVo = local_tile(own_rows_of(params.tma_v_own), TileShapeKV{}, make_coord(_, _0{}));
    Tensor tQgQo = get<0>(tma_partition(params.tma_q_own, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQo)));
    Tensor tKgKo = get<0>(tma_partition(params.tma_k_own, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gKo)));
    Tensor tVgVo = get<0>(tma_partition(params.tma_v_own, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gVo)));

    const bool leader = cutlass::canonical_lane_idx() == 0;
    // A block's K and V come from the same place: the rank's own input where the block lies within its rows, else the
    // inbox, after the wait for their chunks.
    const InPlaceRows::Blocks own_blocks = in_place(params, kBlockN);
    auto load_k = [&](int n) {
      const bool own = own_blocks.holds(n);
      if (!own) wait_for_rows(params, waits, tile, n * kBlockN, min((n + 1) * kBlockN, params.seqlen_k));
      pipeline_k.producer_acquire(k_state);
      if (leader) {
        uint64_t* full = pipeline_k.producer_get_barrier(k_state);
        if (own) copy(params.tma_k_own.with(*full, 0, TMA::CacheHintSm90::EVICT_LAST), tKgKo(_, n), tKsK(_, k_state.index()));
        else copy(params.tma_k.with(*full, 0, TMA::CacheHintSm90::EVICT_LAST), tKgK(_, n), tKsK(_, k_state.index()));
      }
      ++k_state;
    };
    auto load_v = [&](int n) {
      const bool own = own_blocks.holds(n);
      pipeline_v.producer_acquire(v_state);
      if (leader) {
        uint64_t* full = pipeline_v.producer_get_barrier(v_state);
        if (own) copy(params.tma_v_own.with(*full, 0, TMA::CacheHintSm90::EVICT_LAST), tVgVo(_, n), tVsV(_, v_state.index()));
        else copy(params.tma_v.with(*full, 0, TMA::CacheHintSm90::EVICT_LAST), tVgV(_, n), tVsV(_, v_state.index()));
      }
      ++v_state;
    };

    const int n_last = keys.end > 0 ? keys.end - 1 : ceil_div(tile_seqlen_k(params, tile), kBlockN) - 1;
    load_k(n_last);
    if (tile_iteration > 0) {
      cutlass::arch::ClusterBarrier::wait(&smem.q_empty, (tile_iteration - 1) & 1);
    }
    const int q0 = tile.m_block * kBlockM, q1 = min(q0 + kBlockM, params.seqlen_q);
    const bool q_own = in_place(params, kBlockM).holds(tile.m_block);
    if (!q_own) wait_for_rows(params, waits, tile, q0, q1);
    if (leader) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.q_full, Config::kQBytes);
      if (q_own) copy(params.tma_q_own.with(smem.q_full, 0, TMA::CacheHintSm90::EVICT_FIRST), tQgQo, tQsQ);
      else copy(params.tma_q.with(smem.q_full, 0, TMA::CacheHintSm90::EVICT_FIRST), tQgQ, tQsQ);
    }
#pragma unroll 1
    for (int n = n_last; n > keys.begin; --n) {
      load_k(n - 1);
      load_v(n);
    }
    load_v(keys.begin);
  }

  // ---------------------------------------------------------------------------------------------
  // Consumers: all threads of warpgroups 1..n; `thread_idx` in [0, kNumMmaThreads).
  template <class FragO, class Softmax>
  CUTE_DEVICE static void mma(Params const& params, SharedStorage& smem, PipelineKV& pipeline_k,
                              PipelineKV& pipeline_v, PipelineState& k_state, PipelineState& v_state,
                              FragO& tOrO, Softmax& softmax, TileCoord tile, int thread_idx, int tile_iteration,
                              KeyBlocks keys = {}) {
    using namespace cute;
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), SmemLayoutKV{});
    Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), SmemLayoutVt{});

    TiledMmaQK tiled_mma_qk;
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_qk = tiled_mma_qk.get_thread_slice(thread_idx);
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(thread_idx);
    Tensor tSrQ = thr_mma_qk.partition_fragment_A(sQ);
    Tensor tSrK = thr_mma_qk.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stages)
    Tensor tOrV = thr_mma_pv.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stages)

    Tensor tSrS = partition_fragment_C(tiled_mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
    // P in bf16, laid out as the A operand of O += P V. Its registers hold the same (row, col) elements
    // in the same order as the S accumulator (SM90 C fragment of 64xN == A fragments of N/16 k-blocks).
    Tensor tOrP = make_tensor<Element>(partition_shape_A(tiled_mma_pv, Shape<Int<kBlockM>, Int<kBlockN>>{}));
    static_assert(decltype(size(tSrS))::value == decltype(size(tOrP))::value);

    Tensor cS = make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor tScS = thr_mma_qk.partition_C(cS);

    const int warp_group = thread_idx / 128;
    constexpr int kRows = Softmax::kNumRows;  // 2
    float o_rescale[kRows];

    auto convert_s_to_p = [&]() {
      constexpr int N = decltype(size(tSrS))::value;
      cutlass::NumericArrayConverter<Element, float, N> convert;
      auto p = convert(*reinterpret_cast<cutlass::Array<float, N> const*>(tSrS.data()));
      *reinterpret_cast<cutlass::Array<Element, N>*>(tOrP.data()) = p;
    };

    const int n_last = keys.end > 0 ? keys.end - 1 : ceil_div(tile_seqlen_k(params, tile), kBlockN) - 1;
    softmax.reset();
    clear(tOrO);
    cutlass::arch::ClusterBarrier::wait(&smem.q_full, tile_iteration & 1);

    // First (last-in-sequence, possibly partial) key block.
    pipeline_k.consumer_wait(k_state);
    xstage::wgmma_batch<true, -1, false>(tiled_mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    pipeline_k.consumer_release(k_state);
    ++k_state;
    const int seqlen_k = tile_seqlen_k(params, tile);  // read again here rather than held across the wgmma (registers)
    if ((n_last + 1) * kBlockN > seqlen_k) {
      const int cols_left = seqlen_k - n_last * kBlockN;
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) {
        if (get<1>(tScS(i)) >= cols_left) tSrS(i) = -INFINITY;
      }
    }
    softmax.update(tSrS, o_rescale);
    convert_s_to_p();

    // A value ptxas cannot fold (always true): the first part of each softmax step sits under a branch on it, so that
    // the wait for P·V after the branch's join cannot be hoisted above it (ptxas otherwise places that wait before
    // every exponential, to reuse P's registers early).
    unsigned sm_count;
    asm volatile("mov.u32 %0, %%nsmid;" : "=r"(sm_count));
    constexpr int kFirstCols = Config::kExpColsBeforePvWait;
    float m_scaled[kRows], partial[kRows];  // what update_rest needs of update_first
#pragma unroll 1
    for (int n = n_last - 1; n >= keys.begin; --n) {
      pipeline_k.consumer_wait(k_state);
      Turns::wait(warp_group);
      xstage::wgmma_batch<true, -1, false>(tiled_mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
      pipeline_v.consumer_wait(v_state);
      xstage::wgmma_batch<false, -1, true>(tiled_mma_pv, tOrP, tOrV(_, _, _, v_state.index()), tOrO);
      Turns::pass(warp_group);
      warpgroup_wait<1>();
      warpgroup_fence_operand(tSrS);
      pipeline_k.consumer_release(k_state);
      ++k_state;
      if (sm_count > 0) softmax.template update_first<kFirstCols>(tSrS, o_rescale, m_scaled, partial);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      pipeline_v.consumer_release(v_state);
      ++v_state;
      softmax.template update_rest<kFirstCols>(tSrS, o_rescale, m_scaled, partial);
      Softmax::rescale(tOrO, o_rescale);
      convert_s_to_p();
    }
    // Every S = Q K^T of this tile has completed: the producer may load the next tile's Q.
    cutlass::arch::ClusterBarrier::arrive(&smem.q_empty);

    pipeline_v.consumer_wait(v_state);
    xstage::wgmma_batch<false, -1, true>(tiled_mma_pv, tOrP, tOrV(_, _, _, v_state.index()), tOrO);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    pipeline_v.consumer_release(v_state);
    ++v_state;
  }
};

}  // namespace xstage::attention
