// Ulysses sequence parallelism over P ranks as index math (paper §4.3), shared by the fused epilogue, the
// layer's host side and the CPU tests. Plain C++ (XSTAGE_HD).
//
// Rank r holds rows [r·Ms, (r+1)·Ms) of the sequence for all H heads ("sequence-sharded", [B][Ms][H][d]), with
// Ms = M / P. The pre-attention all-to-all makes it hold all M rows of heads [r·Hp, (r+1)·Hp) ("head-sharded",
// [B][M][Hp][d], Hp = H / P); attention runs there; the post-attention all-to-all sends row m of local head
// h back to rank m / Ms, as its row m mod Ms and head r·Hp + h. The fused epilogue does that last step from
// each finished output tile: a tile of b_m rows lands on one rank, or straddles two or more when Ms is not a
// multiple of b_m.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace xstage::attention {

struct UlyssesShape {
  int batch = 1;
  int seqlen = 0;   // M, the whole sequence
  int heads = 0;    // H, all heads
  int head_dim = 128;
  int ranks = 1;    // P

  XSTAGE_HD constexpr int shard_rows() const { return seqlen / ranks; }   // Ms
  XSTAGE_HD constexpr int local_heads() const { return heads / ranks; }   // Hp
  // Where row m of the sequence lives, and its row there.
  XSTAGE_HD constexpr int owner_of_row(int m) const { return m / shard_rows(); }
  XSTAGE_HD constexpr int row_in_owner(int m) const { return m - owner_of_row(m) * shard_rows(); }
  // Global head of local head h on rank r (head-sharded).
  XSTAGE_HD constexpr int global_head(int r, int h) const { return r * local_heads() + h; }
  // Row-heads a rank receives per call in the post-attention all-to-all: all of its Ms rows, every head,
  // every batch (from every rank including itself): what its arrival counter grows by per call.
  XSTAGE_HD constexpr std::uint32_t arrivals_per_call() const {
    return static_cast<std::uint32_t>(batch) * static_cast<std::uint32_t>(shard_rows()) * static_cast<std::uint32_t>(heads);
  }
};

// The part of an output tile (rows [m0, m0 + rows) of the sequence) that goes to one rank.
struct RowSegment {
  int rank = 0;
  int first = 0;  // first row, of the sequence
  int rows = 0;
};

// Splits tile rows [m0, min(m0 + b_m, M)) by owner, in rank order; returns the number of segments written
// to `out` (at most `max_out`; a tile spans at most ceil(b_m / Ms) + 1 ranks).
XSTAGE_HD inline int tile_segments(const UlyssesShape& s, int m0, int b_m, RowSegment* out, int max_out) {
  const int end = m0 + b_m < s.seqlen ? m0 + b_m : s.seqlen;
  int n = 0;
  for (int m = m0; m < end && n < max_out;) {
    const int r = s.owner_of_row(m);
    const int stop = (r + 1) * s.shard_rows() < end ? (r + 1) * s.shard_rows() : end;
    out[n++] = RowSegment{r, m, stop - m};
    m = stop;
  }
  return n;
}

// Tile order for the fused epilogue (tile_scheduler.hpp's m_block_stride): consecutive tiles on m-blocks
// `stride` apart, so the CTAs working at one moment store to every rank rather than all to one or two
// (receiver-side incast at large M).
XSTAGE_HD constexpr int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }
// The smallest stride >= ceil(m_blocks / P) that is coprime with m_blocks (1 for P = 1).
XSTAGE_HD constexpr int destination_interleave_stride(int m_blocks, int P) {
  if (P <= 1 || m_blocks <= 1) return 1;
  int s = (m_blocks + P - 1) / P;
  while (gcd_int(s, m_blocks) != 1) ++s;
  return s;
}

}  // namespace xstage::attention
