// The split tail (attention/key_split.hpp): every key block of every tile is computed by exactly one unit, each CTA
// has at most two units, the combine kernel's list of a tile's parts is exactly the units that computed it, in CTA
// order, and the launcher's rule splits where the wave arithmetic says it pays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/flash_fwd.hpp"
#include "attention/key_split.hpp"

namespace xstage::attention {
namespace {

void expect_cover(int tiles, int key_blocks, int ctas, int tail) {
  SCOPED_TRACE("tiles " + std::to_string(tiles) + ", N " + std::to_string(key_blocks) + ", G " + std::to_string(ctas) + ", tail " +
               std::to_string(tail));
  const KeySplit s{tiles, tail, key_blocks, ctas};
  ASSERT_TRUE(s.active());
  // The whole tiles, as without a split: CTA c takes c, c + G, ... below whole_tiles().
  std::vector<int> whole(tiles, 0);
  for (int cta = 0; cta < ctas; ++cta)
    for (int t = cta; t < s.whole_tiles(); t += ctas) ++whole[t];
  for (int t = 0; t < s.whole_tiles(); ++t) EXPECT_EQ(whole[t], 1) << "whole tile " << t;
  // The tail: each (tile, key block) once; the slots of each tile's units, in CTA order.
  std::vector<std::vector<int>> covered(tail, std::vector<int>(key_blocks, 0));
  std::vector<std::vector<int>> slots(tail);
  std::int64_t most = 0, least = INT64_MAX;
  for (int cta = 0; cta < ctas; ++cta) {
    std::int64_t steps = 0;
    for (int i = 0; i < 2; ++i) {
      const KeyUnit u = s.unit(cta, i);
      if (u.empty()) continue;
      ASSERT_GE(u.tile, s.whole_tiles());
      ASSERT_LT(u.tile, tiles);
      ASSERT_GE(u.begin, 0);
      ASSERT_LE(u.end, key_blocks);
      EXPECT_EQ(u.slot, 2 * cta + i);
      for (int n = u.begin; n < u.end; ++n) ++covered[u.tile - s.whole_tiles()][n];
      slots[u.tile - s.whole_tiles()].push_back(u.slot);
      steps += u.end - u.begin;
    }
    if (s.unit(cta, 0).empty()) EXPECT_TRUE(s.unit(cta, 1).empty()) << "cta " << cta << ": a second unit without a first";
    // The combine kernel takes a tile's parts to be CTAs first_cta .. last_cta wherever the tail has a step per CTA.
    if (s.tail_steps() >= ctas) EXPECT_TRUE(s.holds_steps(cta)) << "cta " << cta << " holds no step";
    most = std::max(most, steps);
    least = std::min(least, steps);
  }
  EXPECT_LE(most - least, 1) << "the tail's steps are spread evenly";
  for (int j = 0; j < tail; ++j) {
    for (int n = 0; n < key_blocks; ++n) EXPECT_EQ(covered[j][n], 1) << "tail tile " << j << ", key block " << n;
    std::vector<int> listed;
    for (int cta = s.first_cta(j); cta <= s.last_cta(j); ++cta)
      if (s.holds_steps(cta)) listed.push_back(s.slot_of(cta, j));
    EXPECT_EQ(listed, slots[j]) << "tail tile " << j << ": the combine kernel's parts";
  }
}

TEST(KeySplit, EveryKeyBlockOnceAndThePartsListed) {
  for (int ctas : {1, 2, 7, 132})
    for (int key_blocks : {1, 2, 3, 34, 128})
      for (int tiles : {1, 5, ctas + 1, 3 * ctas - 1, 8 * ctas + 48 % (ctas + 1)}) {
        const int tail = tiles % ctas;
        if (tail == 0) continue;
        expect_cover(tiles, key_blocks, ctas, tail);
      }
}

TEST(KeySplit, FewerStepsThanCtasLeaveSomeWithout) {
  const KeySplit s{1, 1, 1, 132};  // one tile of one key block
  int units = 0;
  for (int cta = 0; cta < 132; ++cta) units += !s.unit(cta, 0).empty();
  EXPECT_EQ(units, 1);
  EXPECT_EQ(s.first_cta(0), s.last_cta(0));
}

TEST(KeySplit, RuleSplitsWhereTheTailIsLong) {
  // [1, 32768, 12, 128] on 132 SMs: 3072 tiles (23 waves and 36 tiles) of 205 key blocks: the tail's 36 · 205 steps
  // over 132 CTAs are 56 each, against a whole tile's 207.
  EXPECT_EQ(choose_key_split_tail(3072, 205, 132), 36);
  // d = 64, 4 heads, M = 32768: 684 tiles of 192 rows (5 waves and 24 tiles), 256 key blocks.
  EXPECT_EQ(choose_key_split_tail(684, 256, 132), 24);
  // SD3-1024 at d = 64: 1104 tiles (8 waves and 48) of 34 key blocks: the tail's 13 steps and the split's 16 against
  // a tile's 36.
  EXPECT_EQ(choose_key_split_tail(1104, 34, 132), 48);
  // Flux-1024 at d = 128: 864 tiles (6 waves and 72) of 29 key blocks: 16 steps and 16 against 31, no gain.
  EXPECT_EQ(choose_key_split_tail(864, 29, 132), 0);
  // d = 128, 12 heads, M = 8192: 768 tiles (5 waves and 108) of 52: 43 steps and 16 against 54.
  EXPECT_EQ(choose_key_split_tail(768, 52, 132), 0);
  // Flux-2048 at d = 128: 3168 tiles, 24 full waves: nothing to split.
  EXPECT_EQ(choose_key_split_tail(3168, 106, 132), 0);
  // HunyuanVideo-720p: 108 waves, the last of 60 tiles: the gain is under 1% of the run.
  EXPECT_EQ(choose_key_split_tail(14184, 473, 132), 0);
  // One short tile: nothing to gain.
  EXPECT_EQ(choose_key_split_tail(1, 1, 132), 0);
  // Fewer tiles than SMs with long key loops: the whole launch is the tail.
  EXPECT_EQ(choose_key_split_tail(40, 512, 132), 40);
}

// The premise of the Python GPU tests of split launches (tests/python/gpu/test_attention_gpu.py, split_shape): batch
// 2, 3 heads, ~3/4 of the SMs' worth of 128-row tiles (M = 128·t − 50) and 19163 keys split on any SM count, at both
// head dims, as the launcher decides (flash_fwd_tile_config, flash_fwd_key_split); one head of exactly one wave of tiles
// (M = 128·SMs) does not.
TEST(KeySplit, PythonTestShapesSplitOnAnySmCount) {
  for (int sms = 8; sms <= 264; ++sms) {
    SCOPED_TRACE("SMs " + std::to_string(sms));
    for (int head_dim : {64, 128}) {
      const auto splits = [&](int batch, int heads, int seqlen_q) {
        FlashFwdArgs args;
        args.problem = {batch, seqlen_q, 19163, heads, head_dim};
        return flash_fwd_key_split(args, flash_fwd_tile_config(args.problem, sms), sms).active();
      };
      EXPECT_TRUE(splits(2, 3, std::max(1, (3 * sms / 4) / 6) * 128 - 50)) << "d " << head_dim;
      EXPECT_FALSE(splits(1, 1, 128 * sms)) << "d " << head_dim;
    }
  }
}

TEST(KeySplit, PlanFollowsTheMode) {
  EXPECT_FALSE(plan_key_split(KeySplitMode::off, 1104, 34, 132).active());
  EXPECT_FALSE(plan_key_split(KeySplitMode::automatic, 864, 29, 132).active());
  EXPECT_EQ(plan_key_split(KeySplitMode::always, 864, 29, 132).tail_tiles, 72);
  EXPECT_EQ(plan_key_split(KeySplitMode::automatic, 3072, 205, 132).tail_tiles, 36);
  EXPECT_EQ(plan_key_split(KeySplitMode::always, 131, 8, 132).tail_tiles, 131);
  EXPECT_FALSE(plan_key_split(KeySplitMode::always, 264, 8, 132).active());  // no partial wave
  const KeySplit s = plan_key_split(KeySplitMode::always, 5, 3, 132);
  EXPECT_EQ(s.ctas, 132);
  EXPECT_EQ(s.whole_tiles(), 0);
}

TEST(KeySplit, WorkspaceHoldsTwoPartsPerCta) {
  EXPECT_EQ(key_split_workspace_bytes(132, 192, 64), 2 * 132 * 192 * 65 * 4);
}

}  // namespace
}  // namespace xstage::attention
