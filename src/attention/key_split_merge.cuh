// The split tail's merge, inside the forward kernel (key_split.hpp): each unit's CTA stores its part, counts it
// in the tile's arrival count, and the CTA whose part completes the count merges the tile's parts and stores the tile.
#pragma once

#include <cuda_bf16.h>
#include <cute/config.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "attention/flash_fwd_params.hpp"
#include "attention/key_split.hpp"
#include "attention/named_barriers.hpp"
#include "attention/tile_scheduler.hpp"

namespace xstage::attention {

// Where the merged tiles go: the plain kernel's output and its optional log-sum-exp.
struct KeySplitOutput {
  void* o = nullptr;  // bf16 [batch, seq, heads, head_dim] with strides o_strides
  BmhdStrides o_strides;
  float* lse = nullptr;  // optional [batch, heads, seqlen_q]
  int seqlen_q = 0;
  int heads = 0;
};

// Called by all kThreads consumer threads after each has stored its share of a part of tail tile j (of `parts`):
// counts the part and returns, in every one of them, whether it was the tile's last, so that this CTA merges the tile.
// Each thread's stores are fenced at GPU scope before the one count (the count orders them for the CTA that reads
// the parts); the last CTA fences again before it reads.
template <int kThreads>
CUTE_DEVICE bool count_part(int* arrivals, int j, int parts, int thread_idx) {
  __threadfence();
  cutlass::arch::NamedBarrier::sync(kThreads, uint32_t(FwdNamedBarrier::kKeySplitArrival));
  int last = 0;
  if (thread_idx == 0) last = atomicAdd(arrivals + j, 1) == parts - 1 ? 1 : 0;
  // The count's outcome to every consumer thread: a named barrier's OR reduction.
  const uint32_t id = uint32_t(FwdNamedBarrier::kKeySplitArrival) + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\t"
      "setp.ne.s32 p, %0, 0;\n\t"
      "bar.red.or.pred q, %1, %2, p;\n\t"
      "selp.s32 %0, 1, 0, q;\n\t}"
      : "+r"(last)
      : "r"(id), "r"(kThreads)
      : "memory");
  if (last) __threadfence();
  return last != 0;
}

// Merges tail tile j's parts (slots in CTA order) and stores the bf16 tile at `t` (and its log-sum-exp). An item is one
// row's eight columns; each of the kThreads threads takes items thread_idx, thread_idx + kThreads, ... in batches of up
// to four, and for each part issues the loads of the whole batch before it uses them, so that a part costs one round
// trip to L2, not one per item (a merge walking item by item, part by part, took tens of µs). The parts are folded in
// CTA order with a running maximum: m' = max(m, lse_k), s' = s·exp(m − m') + exp(lse_k − m'), and O likewise, the
// tile's O = O' / s', its lse = m' + log s'.
template <int kBlockM, int kHeadDim, int kThreads>
CUTE_DEVICE void merge_parts(KeySplit const& split, float const* workspace, int j, TileCoord const& t, KeySplitOutput const& out,
                             int thread_idx) {
  constexpr int kColumns = 8;  // one 16-byte bf16 store
  constexpr int kPieces = kHeadDim / kColumns;
  constexpr int kItems = kBlockM * kPieces;
  constexpr int kPerThread = (kItems + kThreads - 1) / kThreads;
  constexpr int kBatch = kPerThread < 4 ? kPerThread : 4;
  const KeySplitWorkspace w{split.ctas, kBlockM, kHeadDim, split.tail_tiles};
  const int first = split.first_cta(j), last = split.last_cta(j);
#pragma unroll 1
  for (int base = 0; base < kPerThread; base += kBatch) {
    int offset[kBatch];  // the item's first float in a part: row · d + column
    bool valid[kBatch];
    float m[kBatch], sum[kBatch], acc[kBatch][kColumns];
    CUTE_UNROLL
    for (int b = 0; b < kBatch; ++b) {
      const int idx = thread_idx + (base + b) * kThreads;
      const int r = idx / kPieces;
      valid[b] = base + b < kPerThread && idx < kItems && t.m_block * kBlockM + r < out.seqlen_q;
      offset[b] = r * kHeadDim + idx % kPieces * kColumns;
      m[b] = -INFINITY;
      sum[b] = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < kColumns; ++c) acc[b][c] = 0.f;
    }
#pragma unroll 1
    for (int cta = first; cta <= last; ++cta) {
      if (!split.holds_steps(cta)) continue;
      const int slot = split.slot_of(cta, j);
      const float* part_lse = workspace + w.lse_offset(slot);
      const float* part_o = workspace + w.output_offset(slot);
      float lse[kBatch];
      float4 lo[kBatch], hi[kBatch];
      CUTE_UNROLL
      for (int b = 0; b < kBatch; ++b) {
        if (!valid[b]) continue;
        lse[b] = __ldcg(part_lse + offset[b] / kHeadDim);
        lo[b] = __ldcg(reinterpret_cast<const float4*>(part_o + offset[b]));
        hi[b] = __ldcg(reinterpret_cast<const float4*>(part_o + offset[b]) + 1);
      }
      CUTE_UNROLL
      for (int b = 0; b < kBatch; ++b) {
        if (!valid[b]) continue;
        const float m_new = fmaxf(m[b], lse[b]);
        const float scale = expf(m[b] - m_new), p = expf(lse[b] - m_new);
        const float o[kColumns] = {lo[b].x, lo[b].y, lo[b].z, lo[b].w, hi[b].x, hi[b].y, hi[b].z, hi[b].w};
        sum[b] = sum[b] * scale + p;
        CUTE_UNROLL
        for (int c = 0; c < kColumns; ++c) acc[b][c] = acc[b][c] * scale + p * o[c];
        m[b] = m_new;
      }
    }
    CUTE_UNROLL
    for (int b = 0; b < kBatch; ++b) {
      if (!valid[b]) continue;
      const int r = offset[b] / kHeadDim, col = offset[b] % kHeadDim, row = t.m_block * kBlockM + r;
      const float inv = 1.f / sum[b];
      uint32_t merged[kColumns / 2];  // bf16 pairs
      CUTE_UNROLL
      for (int i = 0; i < kColumns / 2; ++i) {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[b][2 * i] * inv, acc[b][2 * i + 1] * inv);
        merged[i] = *reinterpret_cast<const uint32_t*>(&pair);
      }
      *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(out.o) + bmhd_offset(out.o_strides, t.batch, row, t.head, col)) =
          make_uint4(merged[0], merged[1], merged[2], merged[3]);
      if (out.lse != nullptr && col == 0) out.lse[lse_offset(out.heads, out.seqlen_q, t.batch, t.head, row)] = m[b] + logf(sum[b]);
    }
  }
}

}  // namespace xstage::attention
