// The persistent tile scheduler emits every (batch, head, m_block) exactly once, for any grid size.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include "attention/tile_scheduler.hpp"
#include "attention/tile_shapes.hpp"

namespace xstage::attention {
namespace {

void expect_every_tile_once(int num_m_blocks, int heads, int batch, int num_sms, bool arrival_order = false) {
  const StaticPersistentTileScheduler s{num_m_blocks, heads, batch, 1, arrival_order};
  const int grid = StaticPersistentTileScheduler::grid_size(s.num_tiles(), num_sms);
  ASSERT_GE(grid, 1);
  ASSERT_LE(grid, num_sms);
  std::vector<int> seen(s.num_tiles(), 0);
  std::set<std::tuple<int, int, int>> coords;
  for (int cta = 0; cta < grid; ++cta) {
    int count = 0;
    for (int t = s.first_tile(cta); s.valid(t); t = s.next_tile(t, grid)) {
      ASSERT_GE(t, 0);
      ++seen[t];
      const TileCoord c = s.coord(t);
      ASSERT_GE(c.m_block, 0);
      ASSERT_LT(c.m_block, num_m_blocks);
      ASSERT_GE(c.head, 0);
      ASSERT_LT(c.head, heads);
      ASSERT_GE(c.batch, 0);
      ASSERT_LT(c.batch, batch);
      coords.insert({c.batch, c.head, c.m_block});
      ++count;
    }
    // Balanced: CTA loads differ by at most one tile.
    const int lo = s.num_tiles() / grid;
    EXPECT_TRUE(count == lo || count == lo + 1) << "cta " << cta << " got " << count;
  }
  for (int t = 0; t < s.num_tiles(); ++t) EXPECT_EQ(seen[t], 1) << "tile " << t;
  EXPECT_EQ(int(coords.size()), s.num_tiles());
}

TEST(TileScheduler, EveryTileOnceForManyShapesAndGrids) {
  for (int sms : {1, 7, 132}) {
    expect_every_tile_once(1, 1, 1, sms);
    expect_every_tile_once(64, 4, 1, sms);     // M=8192, 4 heads
    expect_every_tile_once(3, 5, 3, sms);      // odd sizes
    expect_every_tile_once(512, 12, 1, sms);   // M=65536, 12 heads
    expect_every_tile_once(64, 4, 1, sms, true);
    expect_every_tile_once(3, 5, 3, sms, true);
    expect_every_tile_once(512, 12, 2, sms, true);
  }
}

// fused_both: each head's m-blocks from the last, then the next head, batch slowest, so that the first wave holds the
// tiles of the first heads only (the inputs are pushed head by head).
TEST(TileScheduler, ArrivalOrderWalksEachHeadFromTheLastRows) {
  const StaticPersistentTileScheduler s{10, 3, 2, 1, true};
  for (int t = 0; t < 10; ++t) {
    EXPECT_EQ(s.coord(t).m_block, 9 - t);
    EXPECT_EQ(s.coord(t).head, 0);
    EXPECT_EQ(s.coord(t).batch, 0);
  }
  EXPECT_EQ(s.coord(10).m_block, 9);
  EXPECT_EQ(s.coord(10).head, 1);
  EXPECT_EQ(s.coord(29).m_block, 0);
  EXPECT_EQ(s.coord(29).head, 2);
  EXPECT_EQ(s.coord(29).batch, 0);
  EXPECT_EQ(s.coord(30).m_block, 9);
  EXPECT_EQ(s.coord(30).head, 0);
  EXPECT_EQ(s.coord(30).batch, 1);
  for (int t = 0; t + 1 < s.num_tiles(); ++t) {  // (batch, head) never goes back; within one the m-block falls by one
    const TileCoord a = s.coord(t), b = s.coord(t + 1);
    ASSERT_LE(a.batch * 3 + a.head, b.batch * 3 + b.head);
    if (a.batch == b.batch && a.head == b.head) EXPECT_EQ(b.m_block, a.m_block - 1);
  }
}

TEST(TileScheduler, MBlockVariesFastestSoConcurrentCtasShareKV) {
  const StaticPersistentTileScheduler s{10, 3, 2};
  for (int t = 0; t + 1 < s.num_tiles(); ++t) {
    const TileCoord a = s.coord(t), b = s.coord(t + 1);
    if (a.m_block + 1 < 10) {
      EXPECT_EQ(b.m_block, a.m_block + 1);
      EXPECT_EQ(b.head, a.head);
      EXPECT_EQ(b.batch, a.batch);
    }
  }
  EXPECT_EQ(s.coord(10).head, 1);
  EXPECT_EQ(s.coord(30).batch, 1);
}

TEST(TileScheduler, GridNeverExceedsTilesOrSms) {
  EXPECT_EQ(StaticPersistentTileScheduler::grid_size(5, 132), 5);
  EXPECT_EQ(StaticPersistentTileScheduler::grid_size(1000, 132), 132);
}

TEST(TileShapes, ConfigurationsAreConsistent) {
  for (auto id : {FwdTileConfigId::kHdim64Rows128, FwdTileConfigId::kHdim64Rows192, FwdTileConfigId::kHdim128Rows128}) {
    const FwdTileShape t = fwd_tile_shape(id);
    EXPECT_TRUE(t.head_dim == 64 || t.head_dim == 128);
    EXPECT_TRUE(t.consumer_warpgroups == 2 || t.consumer_warpgroups == 3);
    EXPECT_EQ(t.block_m(), 64 * t.consumer_warpgroups);
    EXPECT_EQ(t.block_n % 16, 0);
    EXPECT_GE(t.stages, 2);
  }
  EXPECT_EQ(ceil_div(8193, 128), 65);
  EXPECT_EQ(ceil_div(1, 192), 1);
}

// The wave model against the H200 measurements that set it (docs/ATTENTION.md, "Experiments and what they
// showed"; 132 SMs, batch 1): which d=64 configuration was faster at each point.
TEST(TileConfigChoice, MatchesMeasuredWinnersOnH200) {
  struct Point {
    int heads, seqlen;
    FwdTileConfigId faster;
  };
  const FwdTileConfigId r128 = FwdTileConfigId::kHdim64Rows128, r192 = FwdTileConfigId::kHdim64Rows192;
  const Point measured[] = {{4, 4096, r128},   {4, 8192, r128},   {4, 16384, r192},  {4, 32768, r192},
                            {4, 65536, r192},  {12, 4096, r192},  {12, 8192, r192},  {12, 16384, r192},
                            {12, 32768, r192}, {12, 65536, r192}};
  for (const Point& p : measured) {
    EXPECT_EQ(choose_fwd_tile_config(64, p.heads, p.seqlen, 132), p.faster) << p.heads << " heads, M=" << p.seqlen;
  }
  EXPECT_EQ(choose_fwd_tile_config(128, 4, 4096, 132), FwdTileConfigId::kHdim128Rows128);
  EXPECT_EQ(choose_fwd_tile_config(64, 1, 1, 132), r128);  // one tile either way: the smaller one finishes first
}

TEST(TileConfigChoice, WavesCountPersistentRounds) {
  EXPECT_EQ(fwd_tile_waves(1, 132), 1);
  EXPECT_EQ(fwd_tile_waves(132, 132), 1);
  EXPECT_EQ(fwd_tile_waves(133, 132), 2);
}

}  // namespace
}  // namespace xstage::attention
