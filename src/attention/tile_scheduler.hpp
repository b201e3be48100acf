// Which output tile a persistent CTA computes next.
//
// A tile is one (batch, head, m_block): b_m query rows of one head, all of their key/value blocks.
// Tiles are numbered with m_block fastest, then head, then batch, so CTAs running at the same time work
// on the same head and share its K and V through L2. Persistent CTA c of G takes tiles c, c+G, c+2G, ...
// Within a head the m-blocks go in order, or `m_block_stride` apart (a permutation: the stride is coprime
// with the m-block count), which the fused Ulysses epilogue uses to spread the CTAs working at one moment
// over every destination rank (ulysses/layout.hpp).
// On the path whose inputs arrive while it computes (UlyssesPath::fused_both), `arrival_order` walks each head's
// m-blocks from the last instead: the first wave then needs the inputs of the first head or few only (they are
// pushed head by head, ulysses/layout.hpp's PushOrder), and every tile's key/value loop starts at the last rows
// (mainloop_sm90.hpp), which is where each head's pushes begin.
// The object has no hidden state: the producer warp and both consumer warpgroups walk the same sequence
// independently, and a CPU test walks it too (tests/attention/tile_scheduler_test.cpp).
#pragma once

#include "common/host_device.hpp"

namespace xstage::attention {

struct TileCoord {
  int m_block;
  int head;
  int batch;
};

struct StaticPersistentTileScheduler {
  int num_m_blocks = 0;
  int num_heads = 0;
  int num_batch = 0;
  int m_block_stride = 1;
  bool arrival_order = false;

  XSTAGE_HD constexpr int num_tiles() const { return num_m_blocks * num_heads * num_batch; }
  XSTAGE_HD constexpr bool valid(int tile) const { return tile < num_tiles(); }
  XSTAGE_HD constexpr int first_tile(int cta) const { return cta; }
  XSTAGE_HD constexpr int next_tile(int tile, int num_ctas) const { return tile + num_ctas; }

  XSTAGE_HD constexpr TileCoord coord(int tile) const {
    const int m_index = tile % num_m_blocks;
    const int rest = tile / num_m_blocks;
    const int m_block = arrival_order          ? num_m_blocks - 1 - m_index
                        : m_block_stride == 1 ? m_index
                                              : static_cast<int>((static_cast<long long>(m_index) * m_block_stride) % num_m_blocks);
    return {m_block, rest % num_heads, rest / num_heads};
  }

  // One CTA per SM (the kernel's shared memory allows no more), never more CTAs than tiles.
  static constexpr int grid_size(int num_tiles, int num_sms) {
    return num_tiles < num_sms ? num_tiles : num_sms;
  }
};

XSTAGE_HD constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace xstage::attention
