// The Linear-1 epilogue: SwiGLU in registers (gate column c and up column c + b_n/2 sit in the same thread,
// kAcc/2 values apart: consumer.cuh checks it once), the activation into the ring (bf16, or fp8 codes with
// one 1×128 scale per row), then l1_done of the row's ring slot for the Linear-2 tiles that read it.
//
// Stores. The accumulator layout gives a thread pairs of columns 8j + 2q (q = lane mod 4) of two rows, so a quad
// of lanes holds each of its rows whole. quad_transpose exchanges the quad's words so that each lane stores whole
// 16-byte runs of its row: whole 32-byte sectors, and 4 (fp8) or 8 (bf16, b_n = 256) store instructions per
// thread instead of 32 of 2 or 4 bytes (docs/MOE.md, "Few rows per expert").
//
// Padding rows. Only the tile's first `rows` rows (the expert's; consumer.cuh's expert_rows_in_tile) are stored.
// The padding rows past them are read by the Linear-2 TMA loads (the A box covers the whole tile) but reach no
// output: a GEMM's output row depends on its own row of A (and, fp8, its own row scale), and the storers skip
// padding rows. Their lanes still take part in the shuffles (whose mask is the whole warp); only their stores are
// skipped, by a predicate. Their accumulators come from whatever the dispatch buffer holds past the expert's rows,
// and SwiGLU's IEEE division calls its slow path whenever its operand check (FCHK) flags them, which it did for
// garbage and for zeros alike: the padding warps then reached the warpgroups' barrier ~8 µs after the others.
// So a padding row's gate is taken as 1 and its up as 0 (a select per value, no branch): a fast-path division, an
// activation and amax of 0. Padding rows exist only in an expert's last m-block: bf16 makes the row test once per
// tile (a full tile has none); fp8 selects per value, since a per-tile test gave ptxas two copies of the
// quantizing stores (63-96 spill instructions per fp8 kernel instead of 2-11).
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

// A 4 × 4 transpose of 32-bit words over the 4 lanes of a quad (lanes 4i to 4i + 3): on entry word m of lane q
// is meant for lane m; on return word s of lane q is the word lane s meant for it. Two exchanges of two words
// (lanes 2 apart, then 1 apart), with selects, so that every register index is static.
__device__ __forceinline__ void quad_transpose(std::uint32_t (&w)[4]) {
  const bool q1 = threadIdx.x & 2, q0 = threadIdx.x & 1;
  // Lanes 2 apart: keep the words meant for lanes with q's bit 1, send the other two.
  std::uint32_t s0 = __shfl_xor_sync(0xffffffffu, q1 ? w[0] : w[2], 2);
  std::uint32_t s1 = __shfl_xor_sync(0xffffffffu, q1 ? w[1] : w[3], 2);
  // c[i][k]: from the lane whose bit 1 is i (bit 0 is q's), meant for the lane whose bit 0 is k.
  const std::uint32_t c00 = q1 ? s0 : w[0], c01 = q1 ? s1 : w[1], c10 = q1 ? w[2] : s0, c11 = q1 ? w[3] : s1;
  // Lanes 1 apart: keep the words meant for q's bit 0, send the other two.
  const std::uint32_t t0 = __shfl_xor_sync(0xffffffffu, q0 ? c00 : c01, 1);
  const std::uint32_t t1 = __shfl_xor_sync(0xffffffffu, q0 ? c10 : c11, 1);
  w[0] = q0 ? t0 : c00;
  w[1] = q0 ? c01 : t0;
  w[2] = q0 ? t1 : c10;
  w[3] = q0 ? c11 : t1;
}

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
    // Row half h of this thread holds bf16 pairs W[j] (j < G = b_n / 16) at columns 8j + 2q, q = tid % 4 (value
    // v = 4j + 2h + e, consumer.cuh checks it): lane q stores groups [G/4·q, G/4·(q + 1)) of the row, each one
    // 16-byte store of W[j] from lanes 0-3.
    constexpr int kGroups = kAcc / 8, kPerLane = kGroups / 4;
    const int q = tid % 4;
    auto store = [&](auto masked) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h;
        // A padding row: shuffled, not stored, gate 1 and up 0 (the header).
        const bool store_row = !masked || r < rows;
        auto gate = [&](int v) { return store_row ? acc(v) : 1.0f; };
        auto up = [&](int v) { return store_row ? acc(v + kAcc / 2) : 0.0f; };
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          std::uint32_t x[4];  // word m: W[G/4·m + i], meant for lane m
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const int v = 4 * (kPerLane * m + i) + 2 * h;
            const __nv_bfloat162 p = __floats2bfloat162_rn(swiglu(gate(v), up(v)), swiglu(gate(v + 1), up(v + 1)));
            x[m] = reinterpret_cast<const std::uint32_t&>(p);
          }
          quad_transpose(x);
          if (store_row) *reinterpret_cast<uint4*>(ring + r * pitch + 8 * (kPerLane * q + i)) = uint4{x[0], x[1], x[2], x[3]};
        }
      }
    };
    if (rows >= C::kBlockM) store(std::false_type{});
    else store(std::true_type{});
  } else {
    // act = silu(gate) · up in fp32; this tile's 128 act columns are activation block n of each row:
    // amax over the row's quad of threads, then codes into the ring and one scale per row.
    // A padding row's gate is 1 and its up 0 (the header).
    float amax[2] = {0.0f, 0.0f};
#pragma unroll
    for (int v = 0; v < kAcc / 2; ++v) {
      const bool pad = r0 + ((v & 2) ? 8 : 0) >= rows;
      acc(v) = swiglu(pad ? 1.0f : acc(v), pad ? 0.0f : acc(v + kAcc / 2));
      amax[(v >> 1) & 1] = fmaxf(amax[(v >> 1) & 1], fabsf(acc(v)));
    }
#pragma unroll
    for (int rh = 0; rh < 2; ++rh)
      for (int o = 1; o < 4; o *= 2) amax[rh] = fmaxf(amax[rh], __shfl_xor_sync(0xffffffffu, amax[rh], o));
    const fp8::BlockScale scale[2] = {fp8::block_scale(amax[0]), fp8::block_scale(amax[1])};
    std::uint8_t* ring = at<std::uint8_t>(prm.local, w.ring.l1_tile_offset(t.row, t.n_block) + cta_row0 * w.ring.row_pitch_bytes);
    const std::int64_t pitch = pr.h_inter;
    // Row half h of this thread holds code pairs P[j] (j < 16) at columns 8j + 2q, q = tid % 4, as in bf16 above:
    // lane q stores bytes [32q, 32q + 32) of the row as two 16-byte stores.
    const int q = tid % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      std::uint32_t a[4], b[4];  // word m: P[4m], P[4m + 1] (a) and P[4m + 2], P[4m + 3] (b), meant for lane m
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        auto pair = [&](int j) {
          return static_cast<std::uint32_t>(fp8::quantize_pair(acc(4 * j + 2 * h), acc(4 * j + 2 * h + 1), scale[h]));
        };
        a[m] = pair(4 * m) | pair(4 * m + 1) << 16;
        b[m] = pair(4 * m + 2) | pair(4 * m + 3) << 16;
      }
      quad_transpose(a);
      quad_transpose(b);
      // a[s]: lane s's P[4q], P[4q + 1]; the row's bytes [32q + 8i, +8) are P[4q + i] of lanes 0-3.
      const uint4 lo = {__byte_perm(a[0], a[1], 0x5410), __byte_perm(a[2], a[3], 0x5410),
                        __byte_perm(a[0], a[1], 0x7632), __byte_perm(a[2], a[3], 0x7632)};
      const uint4 hi = {__byte_perm(b[0], b[1], 0x5410), __byte_perm(b[2], b[3], 0x5410),
                        __byte_perm(b[0], b[1], 0x7632), __byte_perm(b[2], b[3], 0x7632)};
      const int r = r0 + 8 * h;
      std::uint8_t* dst = ring + r * pitch + 32 * q;
      cutlass::arch::global_store<uint4, 16>(lo, dst, r < rows);
      cutlass::arch::global_store<uint4, 16>(hi, dst + 16, r < rows);
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
