// The Linear-1 epilogue: SwiGLU in registers (gate column c and up column c + b_n/2 sit in the same thread,
// kAcc/2 values apart: consumer.cuh checks it once), the activation into the ring (bf16, or fp8 codes with
// one 1×128 scale per row), then l1_done of the row's ring slot for the Linear-2 tiles that read it.
//
// Only the tile's first `rows` rows (the expert's; consumer.cuh's expert_rows_in_tile) are stored. The padding
// rows past them are read by the Linear-2 TMA loads (the A box covers the whole tile) but reach no output: a
// GEMM's output row depends on its own row of A (and, fp8, its own row scale), and the storers skip padding
// rows. Not storing them keeps the epilogue from issuing partial-sector stores (2 or 4 bytes per thread) into
// ring lines nothing needs, which with few rows per expert are most of its stores (docs/MOE.md, "Few rows per
// expert"). Padding rows exist only in an expert's last m-block: in bf16 the row test is made once per tile (a
// full tile stores with no per-row test). fp8 predicates each store instead: one per-tile test gave ptxas two
// copies of the quantizing stores (63-96 spill instructions per fp8 kernel instead of 2-11), and an `if` per
// store a divergent branch around each store.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/memory.h>

#include <cstdint>
#include <type_traits>

#include "moe/fp8/fp8.hpp"
#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"
#include "moe/schedule/scheduler.hpp"
#include "moe/swiglu.cuh"

namespace xstage::moe {

inline constexpr int kL1EpilogueBarrier = 1;  // named barrier of the consumer warpgroups

template <class C, class Acc, class Coords>
__device__ __forceinline__ void l1_epilogue(const MegaMoeParams<C>& prm, const Tile& t, int cta_row0, int rows, Acc& acc,
                                            const Coords& tCcC, int r0, int tid, long long& stored, long long& fenced) {
  using namespace cute;
  const MoeProblem& pr = prm.problem;
  const SymmetricWindow& w = prm.window;
  constexpr int kAcc = decltype(size(acc))::value;
  if constexpr (!C::kFp8) {
    // act = silu(gate) · up, bf16, into ring columns [n·b_n/2, (n+1)·b_n/2) of row block p.
    __nv_bfloat16* ring = at<__nv_bfloat16>(prm.local, w.ring.l1_tile_offset(t.row, t.n_block) + cta_row0 * w.ring.row_pitch_bytes);
    const std::int64_t pitch = pr.h_inter;
    auto store = [&](auto masked) {
#pragma unroll
      for (int v = 0; v < kAcc / 2; v += 2) {
        const int r = get<0>(tCcC(v)), c = get<1>(tCcC(v));
        if (masked && r >= rows) continue;
        const float a0 = swiglu(acc(v), acc(v + kAcc / 2)), a1 = swiglu(acc(v + 1), acc(v + 1 + kAcc / 2));
        *reinterpret_cast<__nv_bfloat162*>(ring + r * pitch + c) = __floats2bfloat162_rn(a0, a1);
      }
    };
    if (rows >= C::kBlockM) store(std::false_type{});
    else store(std::true_type{});
  } else {
    // act = silu(gate) · up in fp32; this tile's 128 act columns are activation block n of each row:
    // amax over the row's quad of threads, then codes into the ring and one scale per row.
    float amax[2] = {0.0f, 0.0f};
#pragma unroll
    for (int v = 0; v < kAcc / 2; ++v) {
      acc(v) = swiglu(acc(v), acc(v + kAcc / 2));
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
      cutlass::arch::global_store<std::uint16_t, 2>(fp8::quantize_pair(acc(v), acc(v + 1), sv), ring + r * pitch + c, r < rows);
    }
    if (tid % 4 == 0) {
      if (r0 < rows) *at<float>(prm.local, w.ring.scale_offset(t.row, cta_row0 + r0, t.n_block)) = scale[0].scale;
      if (r0 + 8 < rows) *at<float>(prm.local, w.ring.scale_offset(t.row, cta_row0 + r0 + 8, t.n_block)) = scale[1].scale;
    }
  }
  stored = stats_clock();
  fence_proxy_async_global();
  __threadfence();
  fenced = stats_clock();
  cutlass::arch::NamedBarrier::sync(C::kConsumerThreads, kL1EpilogueBarrier);
  if (tid == 0) red_release_gpu_add(at<std::uint32_t>(prm.local, w.counters.l1_done(w.ring.slot(t.row))), 1);
}

}  // namespace xstage::moe
