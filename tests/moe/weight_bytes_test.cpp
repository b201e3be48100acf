// The expert weight bytes of `xstage moe bench --hbm-reference` (harness/weight_stream.hpp) against values worked
// out by hand from moe/layer.hpp's layouts, and the rule that says when a streaming read of them is an HBM number.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "moe/harness/weight_stream.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

using test::layer_problem;

// DeepSeek-V3-like: h 7168, h_inter 2048, 256 experts, top-8 (tokens and tile width do not change the bytes).
MoeProblem deepseek(DType dtype, int P) { return layer_problem(7168, 2048, 256, 8, 1024, dtype, 256, P); }

TEST(ExpertWeightBytes, DeepSeekV3LikeBf16) {
  // EP = 1: W1 = 256·(2·2048)·7168·2 B, W2 = 256·7168·2048·2 B, no scales.
  const ExpertWeightBytes ep1 = expert_weight_bytes(deepseek(DType::bf16, 1));
  EXPECT_EQ(ep1.W1, 15'032'385'536);
  EXPECT_EQ(ep1.W2, 7'516'192'768);
  EXPECT_EQ(ep1.W1_scales, 0);
  EXPECT_EQ(ep1.W2_scales, 0);
  EXPECT_EQ(ep1.total(), 22'548'578'304);
  // EP = 2: 128 experts per rank, half of everything.
  const ExpertWeightBytes ep2 = expert_weight_bytes(deepseek(DType::bf16, 2));
  EXPECT_EQ(ep2.W1, 7'516'192'768);
  EXPECT_EQ(ep2.W2, 3'758'096'384);
  EXPECT_EQ(ep2.total(), 11'274'289'152);
}

TEST(ExpertWeightBytes, DeepSeekV3LikeFp8) {
  // EP = 1: one byte per weight; W1_scales 256·4096/128 = 8192 rows of 7168/128 = 56 fp32 (a multiple of 4: no
  // padding), W2_scales 256·7168/128 = 14336 rows of 2048/128 = 16 fp32.
  const ExpertWeightBytes ep1 = expert_weight_bytes(deepseek(DType::fp8_e4m3, 1));
  EXPECT_EQ(ep1.W1, 7'516'192'768);
  EXPECT_EQ(ep1.W2, 3'758'096'384);
  EXPECT_EQ(ep1.W1_scales, 8192 * 56 * 4);
  EXPECT_EQ(ep1.W2_scales, 14336 * 16 * 4);
  EXPECT_EQ(ep1.total(), 11'277'041'664);
  const ExpertWeightBytes ep2 = expert_weight_bytes(deepseek(DType::fp8_e4m3, 2));
  EXPECT_EQ(ep2.W1, 3'758'096'384);
  EXPECT_EQ(ep2.W2, 1'879'048'192);
  EXPECT_EQ(ep2.W1_scales, 917'504);
  EXPECT_EQ(ep2.W2_scales, 458'752);
  EXPECT_EQ(ep2.total(), 5'638'520'832);
}

TEST(ExpertWeightBytes, Fp8ScaleRowsArePaddedTo16Bytes) {
  // h = h_inter = 384: 3 K blocks per scale row, stored as 4 fp32. W1_scales 4·768/128 = 24 rows, W2_scales
  // 4·384/128 = 12 rows, 16 B each.
  const ExpertWeightBytes b = expert_weight_bytes(layer_problem(384, 384, 4, 2, 64, DType::fp8_e4m3, 128, 1));
  EXPECT_EQ(b.W1, 4 * 768 * 384);
  EXPECT_EQ(b.W2, 4 * 384 * 384);
  EXPECT_EQ(b.W1_scales, 24 * 16);
  EXPECT_EQ(b.W2_scales, 12 * 16);
}

TEST(ExpertWeightBytes, RejectsAnInvalidProblem) {
  EXPECT_THROW(expert_weight_bytes(layer_problem(7168, 2048, 255, 8, 1024, DType::bf16, 256, 2)), InputError);  // E % P
}

TEST(ReadStreamsFromHbm, NeedsFourTimesTheL2) {
  const std::int64_t l2 = 62'914'560;  // H200's 60 MiB
  EXPECT_TRUE(read_streams_from_hbm(expert_weight_bytes(deepseek(DType::fp8_e4m3, 2)).total(), l2));
  EXPECT_TRUE(read_streams_from_hbm(4 * l2, l2));
  EXPECT_FALSE(read_streams_from_hbm(4 * l2 - 1, l2));
  EXPECT_FALSE(read_streams_from_hbm(expert_weight_bytes(layer_problem(384, 384, 4, 2, 64, DType::fp8_e4m3, 128, 1)).total(), l2));
  EXPECT_FALSE(read_streams_from_hbm(1'000'000'000, 0));  // no L2 size known: no claim
}

}  // namespace
}  // namespace xstage::moe
