// The consumers' mainloops over one tile's k-blocks (both operands in shared memory, fed by the producer's
// pipeline): bf16 accumulates the whole 64 × b_n warpgroup tile; fp8 W8A8 promotes each 128-wide K block
// with its scales (kernel/config.hpp says why it runs as two 64 × 128 halves).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "common/sm90_wgmma.cuh"
#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"
#include "moe/schedule/scheduler.hpp"

namespace xstage::moe {

// A warpgroup whose 64 rows of the tile are all padding (an expert's last m-block holds fewer rows than
// the tile) computes nothing: it waits for each stage and releases it, so the pipeline's protocol is the
// same as for a computing warpgroup. Its own loop, so the computing mainloops below keep no branch (they are
// then called with no k-block).
template <class C>
__device__ __forceinline__ void mainloop_idle(typename C::Pipeline& pipeline, typename C::Pipeline::PipelineState& state, int k_blocks,
                                              const comm::WaitContext& wait) {
  for (int kb = 0; kb < k_blocks; ++kb) {
    comm::bounded_consumer_wait(pipeline, state, wait, static_cast<int>(MoeWait::pipeline_full));
    pipeline.consumer_release(state);
    ++state;
  }
}

// One wgmma batch per k-block, one batch in flight while the next stage is awaited.
template <class C, class Mma, class FragA, class FragB, class Acc>
__device__ __forceinline__ void mainloop_bf16(typename C::Pipeline& pipeline, typename C::Pipeline::PipelineState& state,
                                              Mma& mma, FragA& tCrA, FragB& tCrB, Acc& acc, int k_blocks,
                                              const comm::WaitContext& wait) {
  using namespace cute;
  if (k_blocks == 0) return;  // an idle warpgroup (mainloop_idle): nothing consumed, nothing to release
  typename C::Pipeline::PipelineState previous = state;
  for (int kb = 0; kb < k_blocks; ++kb) {
    comm::bounded_consumer_wait(pipeline, state, wait, static_cast<int>(MoeWait::pipeline_full));
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

// The scales of tile t for this thread's rows (cta_row0 + r0 inside the scheduler row).
template <class C>
__device__ __forceinline__ Fp8ScaleSource fp8_scale_source(const MegaMoeParams<C>& prm, const Tile& t, int cta_row0, int r0) {
  const MoeProblem& pr = prm.problem;
  const SymmetricWindow& w = prm.window;
  return t.stage == Stage::L1
             ? Fp8ScaleSource{at<const float>(prm.local, w.dispatch.scale_offset(static_cast<std::int64_t>(t.row) * pr.b_m + cta_row0 + r0, 0)),
                              w.dispatch.capacity_rows,
                              prm.W1_scales + static_cast<std::int64_t>(t.expert * pr.P1_l1_n_blocks() + t.n_block) * 2 * prm.w1_scale_pitch,
                              prm.w1_scale_pitch, true}
             : Fp8ScaleSource{at<const float>(prm.local, w.ring.scale_offset(t.row, cta_row0 + r0, 0)),
                              static_cast<std::int64_t>(w.ring.slots) * pr.b_m,
                              prm.W2_scales + (static_cast<std::int64_t>(t.expert) * (pr.h_hidden / kScaleBlock) + 2 * t.n_block) * prm.w2_scale_pitch,
                              prm.w2_scale_pitch, !C::kHalfL2 || pr.l2_block_cols(t.n_block) > C::kMmaN};
}

// Per 128-wide K block and per half, the block's sum into tmp, then acc += tmp · fp32(scale_a · scale_b).
// The next block's scales load while this one multiplies.
template <class C, class Mma, class FragA, class FragB, class Acc, class Tmp>
__device__ __forceinline__ void mainloop_fp8(typename C::Pipeline& pipeline, typename C::Pipeline::PipelineState& state,
                                             Mma& mma, FragA& tCrA, FragB& tCrB, Acc& acc, Tmp& tmp, const Fp8ScaleSource& src,
                                             int k_blocks, const comm::WaitContext& wait) {
  using namespace cute;
  constexpr int kAcc = decltype(size(acc))::value;
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
    comm::bounded_consumer_wait(pipeline, state, wait, static_cast<int>(MoeWait::pipeline_full));
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

}  // namespace xstage::moe
