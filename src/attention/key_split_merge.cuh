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

// Merges tail tile j's parts (slots in CTA order) and stores the bf16 tile at `t` (and its log-sum-exp): one row's
// eight columns an item, kThreads threads walking the tile's items.
template <int kBlockM, int kHeadDim, int kThreads>
CUTE_DEVICE void merge_parts(KeySplit const& split, float const* workspace, int j, TileCoord const& t, KeySplitOutput const& out,
                             int thread_idx) {
  constexpr int kColumns = 8;  // one 16-byte bf16 store
  constexpr int kPieces = kHeadDim / kColumns;
  const KeySplitWorkspace w{split.ctas, kBlockM, kHeadDim, split.tail_tiles};
  const int first = split.first_cta(j), last = split.last_cta(j);
#pragma unroll 1
  for (int idx = thread_idx; idx < kBlockM * kPieces; idx += kThreads) {
    const int r = idx / kPieces, col = idx % kPieces * kColumns;
    const int row = t.m_block * kBlockM + r;
    if (row >= out.seqlen_q) break;  // rows grow with idx
    float m = -INFINITY;
    for (int cta = first; cta <= last; ++cta)
      if (split.holds_steps(cta)) m = fmaxf(m, __ldcg(workspace + w.lse_offset(split.slot_of(cta, j)) + r));
    float acc[kColumns] = {};
    float sum = 0.f;
    for (int cta = first; cta <= last; ++cta) {
      if (!split.holds_steps(cta)) continue;
      const int slot = split.slot_of(cta, j);
      const float p = expf(__ldcg(workspace + w.lse_offset(slot) + r) - m);
      sum += p;
      const float4* o = reinterpret_cast<const float4*>(workspace + w.output_offset(slot) + std::int64_t{r} * kHeadDim + col);
      const float4 a = __ldcg(o), b = __ldcg(o + 1);
      acc[0] += p * a.x, acc[1] += p * a.y, acc[2] += p * a.z, acc[3] += p * a.w;
      acc[4] += p * b.x, acc[5] += p * b.y, acc[6] += p * b.z, acc[7] += p * b.w;
    }
    const float inv = 1.f / sum;
    uint32_t merged[kColumns / 2];  // bf16 pairs
    CUTE_UNROLL
    for (int i = 0; i < kColumns / 2; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[2 * i] * inv, acc[2 * i + 1] * inv);
      merged[i] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(out.o) + bmhd_offset(out.o_strides, t.batch, row, t.head, col)) =
        make_uint4(merged[0], merged[1], merged[2], merged[3]);
    if (out.lse != nullptr && col == 0) out.lse[lse_offset(out.heads, out.seqlen_q, t.batch, t.head, row)] = m + logf(sum);
  }
}

}  // namespace xstage::attention
