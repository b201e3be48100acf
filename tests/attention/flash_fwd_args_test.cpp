// Index/stride math and argument validation of the forward kernel (no GPU needed).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention/flash_fwd.hpp"
#include "attention/flash_fwd_params.hpp"
#include "attention/reference.hpp"
#include "attention/tile_shapes.hpp"
#include "common/error.hpp"

namespace xstage::attention {
namespace {

TEST(BmhdStrides, PackedOffsetsMatchRowMajorBMHD) {
  const int B = 2, M = 5, H = 3, D = 64;
  const BmhdStrides s = packed_bmhd_strides(M, H, D);
  int64_t expect = 0;
  for (int b = 0; b < B; ++b)
    for (int m = 0; m < M; ++m)
      for (int h = 0; h < H; ++h)
        for (int c = 0; c < D; ++c) ASSERT_EQ(bmhd_offset(s, b, m, h, c), expect++);
}

TEST(BmhdStrides, PackedQkvViewsInterleave) {
  // [b, M, 3, h, d]: Q, K, V are three views with row stride 3*h*d and base offsets 0, h*d, 2*h*d.
  const int M = 7, H = 4, D = 128;
  const BmhdStrides s{int64_t(M) * 3 * H * D, 3 * H * D, D};
  EXPECT_EQ(bmhd_offset(s, 0, 1, 0, 0), 3 * H * D);
  EXPECT_EQ(bmhd_offset(s, 1, 0, 2, 5), int64_t(M) * 3 * H * D + 2 * D + 5);
}

TEST(LseOffset, BatchHeadsSeq) {
  EXPECT_EQ(lse_offset(12, 4096, 0, 0, 7), 7);
  EXPECT_EQ(lse_offset(12, 4096, 0, 1, 0), 4096);
  EXPECT_EQ(lse_offset(12, 4096, 1, 0, 0), 12 * 4096);
}

// A well-formed problem with fake (aligned, never dereferenced) pointers.
FlashFwdArgs valid_args(int d = 128) {
  FlashFwdArgs a;
  a.problem.batch = 2;
  a.problem.seqlen_q = a.problem.seqlen_k = 1000;
  a.problem.heads = 3;
  a.problem.head_dim = d;
  a.problem.softmax_scale = 0.125f;
  a.problem.q = a.problem.k = a.problem.v = a.problem.o = packed_bmhd_strides(1000, 3, d);
  a.q = a.k = a.v = reinterpret_cast<void*>(uintptr_t(0x10000));
  a.o = reinterpret_cast<void*>(uintptr_t(0x20000));
  return a;
}

std::string error_of(const FlashFwdArgs& a) {
  try {
    validate_flash_fwd_args(a);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Validate, AcceptsWellFormedProblems) {
  EXPECT_EQ(error_of(valid_args(128)), "");
  EXPECT_EQ(error_of(valid_args(64)), "");
  FlashFwdArgs a = valid_args();
  a.problem.seqlen_q = 1;
  a.problem.seqlen_k = 77;
  EXPECT_EQ(error_of(a), "");
}

TEST(Validate, RejectsUnbuiltHeadDims) {
  for (int d : {0, 32, 96, 256}) {
    FlashFwdArgs a = valid_args();
    a.problem.head_dim = d;
    EXPECT_NE(error_of(a).find("head_dim must be 64 or 128"), std::string::npos) << d;
  }
}

TEST(Validate, RejectsEmptyShapes) {
  FlashFwdArgs a = valid_args();
  a.problem.seqlen_q = 0;
  EXPECT_NE(error_of(a).find(">= 1"), std::string::npos);
  a = valid_args();
  a.problem.heads = -1;
  EXPECT_NE(error_of(a).find(">= 1"), std::string::npos);
}

TEST(Validate, RejectsStridesTheTmaCannotUse) {
  FlashFwdArgs a = valid_args();
  a.problem.k.row = 3 * 128 + 4;  // not a multiple of 16 bytes
  EXPECT_NE(error_of(a).find("K row stride"), std::string::npos);
  a = valid_args();
  a.problem.o.head = 0;
  EXPECT_NE(error_of(a).find("O head stride"), std::string::npos);
}

TEST(Validate, RejectsNullAndMisalignedPointers) {
  FlashFwdArgs a = valid_args();
  a.v = nullptr;
  EXPECT_NE(error_of(a).find("V pointer is null"), std::string::npos);
  a = valid_args();
  a.q = reinterpret_cast<void*>(uintptr_t(0x10008));
  EXPECT_NE(error_of(a).find("16-byte aligned"), std::string::npos);
}

TEST(Validate, RejectsBadScale) {
  FlashFwdArgs a = valid_args();
  a.problem.softmax_scale = 0.f;
  EXPECT_NE(error_of(a).find("softmax_scale"), std::string::npos);
}

TEST(Validate, RejectsAForcedConfigurationOfAnotherHeadDim) {
  FlashFwdArgs a = valid_args(128);
  a.tile_config = FwdTileConfigId::kHdim64Rows192;
  EXPECT_NE(error_of(a).find("is for head_dim 64"), std::string::npos);
  a = valid_args(64);
  a.tile_config = FwdTileConfigId::kHdim64Rows192;
  EXPECT_EQ(error_of(a), "");
}

TEST(Validate, PerBatchKeyLengthsNeedOnlyAnAlignedPointer) {
  FlashFwdArgs a = valid_args();
  static const int32_t lengths[4] = {1, 1000, 0, -3};  // values are the kernel's to clamp: never read here
  a.seqlen_k_per_batch = lengths;
  EXPECT_EQ(error_of(a), "");
  a.seqlen_k_per_batch = reinterpret_cast<const int32_t*>(reinterpret_cast<uintptr_t>(lengths) + 2);
  EXPECT_NE(error_of(a).find("per-batch key lengths pointer"), std::string::npos);
  EXPECT_NE(error_of(a).find("is not 4-byte aligned"), std::string::npos);
}

TEST(ClampSeqlenK, KeepsEveryRowWithinItsKeys) {
  EXPECT_EQ(clamp_seqlen_k(1, 300), 1);
  EXPECT_EQ(clamp_seqlen_k(193, 300), 193);
  EXPECT_EQ(clamp_seqlen_k(300, 300), 300);
  EXPECT_EQ(clamp_seqlen_k(301, 300), 300);
  EXPECT_EQ(clamp_seqlen_k(0, 300), 1);
  EXPECT_EQ(clamp_seqlen_k(-5, 300), 1);
  EXPECT_EQ(clamp_seqlen_k(INT32_MAX, 1), 1);
}

TEST(ReferenceCpu, PerBatchKeyLengthsAttendToTheFirstKeysOnly) {
  // Sequence 0 keeps 2 of its 5 keys, sequence 1 all (7 clamps to 5): equal to the reference on the kept keys alone.
  FlashFwdProblem p;
  p.batch = 2;
  p.seqlen_q = 3;
  p.seqlen_k = 5;
  p.heads = 1;
  p.head_dim = 64;
  p.softmax_scale = 0.125f;
  p.q = p.o = packed_bmhd_strides(3, 1, 64);
  p.k = p.v = packed_bmhd_strides(5, 1, 64);
  std::vector<uint16_t> q(2 * 3 * 64), k(2 * 5 * 64), v(2 * 5 * 64);
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint16_t(0x3f80 + (i * 37) % 97);  // bf16 values around 1..2
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint16_t(0x3f00 + (i * 53) % 211), v[i] = uint16_t(0xbf00 + (i * 29) % 173);
  const int32_t lengths[2] = {2, 7};
  std::vector<double> o, lse, o_two, lse_two, o_all, lse_all;
  reference_attention_cpu(p, q.data(), k.data(), v.data(), o, lse, lengths);
  FlashFwdProblem two = p;  // sequence 0 over its first two keys (same strides, fewer rows)
  two.seqlen_k = 2;
  reference_attention_cpu(two, q.data(), k.data(), v.data(), o_two, lse_two);
  reference_attention_cpu(p, q.data(), k.data(), v.data(), o_all, lse_all);
  for (int i = 0; i < 3 * 64; ++i) {
    EXPECT_DOUBLE_EQ(o[i], o_two[i]);
    EXPECT_DOUBLE_EQ(o[3 * 64 + i], o_all[3 * 64 + i]);
  }
  for (int m = 0; m < 3; ++m) {
    EXPECT_DOUBLE_EQ(lse[m], lse_two[m]);
    EXPECT_DOUBLE_EQ(lse[3 + m], lse_all[3 + m]);
    EXPECT_NE(lse[m], lse_all[m]);
  }
}

TEST(TileDescription, NamesTheTileShape) {
  EXPECT_EQ(describe(fwd_tile_shape(FwdTileConfigId::kHdim128Rows128)),
            "b_m=128 b_n=160 stages=2 (2 consumer warpgroups)");
  EXPECT_EQ(describe(fwd_tile_shape(FwdTileConfigId::kHdim64Rows192)),
            "b_m=192 b_n=128 stages=3 (3 consumer warpgroups)");
}

}  // namespace
}  // namespace xstage::attention
