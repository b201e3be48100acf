// Problem validation and the symmetric-window layout: regions disjoint, aligned and in bounds; every
// index the kernel computes lands inside its region; capacity overflow is a clear InputError.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "common/error.hpp"
#include "moe/problem/layout.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

MoeProblem deepseek(int P) {
  MoeProblem p;
  p.P_ranks = P;
  p.E_experts = 256;
  p.top_k = 8;
  p.h_hidden = 7168;
  p.h_inter = 2048;
  p.T_tokens = 4096;
  return p;
}

void expect_input_error(const MoeProblem& p, const std::string& fragment) {
  try {
    validate(p);
    FAIL() << "expected an InputError mentioning '" << fragment << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(MoeProblem, ValidShapesPass) {
  EXPECT_NO_THROW(validate(deepseek(2)));
  EXPECT_NO_THROW(validate(deepseek(8)));
  MoeProblem fp8 = deepseek(8);
  fp8.dtype = DType::fp8_e4m3;
  EXPECT_NO_THROW(validate(fp8));
  EXPECT_EQ(deepseek(8).P1_l1_n_blocks(), 32);
  EXPECT_EQ(deepseek(8).P2_l2_n_blocks(), 56);
  // b_n = 256 and h an odd multiple of 128 (DiT-like h = 1152): the last L2 n-block is half full.
  MoeProblem dit = deepseek(8);
  dit.h_hidden = 1152, dit.h_inter = 4608, dit.b_n = 256;
  EXPECT_NO_THROW(validate(dit));
  EXPECT_EQ(dit.P2_l2_n_blocks(), 5);
  EXPECT_EQ(dit.l2_block_cols(3), 256);
  EXPECT_EQ(dit.l2_block_cols(4), 128);
  dit.h_hidden = 1152 + 64;  // not a multiple of 128: a quarter block is not supported
  expect_input_error(dit, "Linear-2's N");
  EXPECT_EQ(deepseek(8).E_local(), 32);
  EXPECT_EQ(deepseek(8).owner_rank(255), 7);
  EXPECT_EQ(deepseek(8).local_expert(255), 31);
}

TEST(MoeProblem, BadShapesSayWhatIsWrong) {
  MoeProblem p = deepseek(8);
  p.P_ranks = 3;
  expect_input_error(p, "cannot be split evenly");
  p = deepseek(8), p.top_k = 257;
  expect_input_error(p, "top_k");
  p = deepseek(8), p.top_k = 0;
  expect_input_error(p, "top_k");
  p = deepseek(8), p.h_hidden = 7168 + 64;
  expect_input_error(p, "Linear-2's N");
  p = deepseek(8), p.h_inter = 2048 + 32;  // 2·h_inter = 4160, not a multiple of 128
  expect_input_error(p, "Linear-1's N");
  p = deepseek(8), p.b_n = 64, p.h_inter = 2048 + 32;  // 2·h_inter multiple of 64, but h_inter not of b_k = 64
  expect_input_error(p, "Linear-2's K");
  p = deepseek(8), p.dtype = DType::fp8_e4m3, p.b_n = 64, p.h_hidden = 7168 + 64;  // b_k = 128 for fp8
  expect_input_error(p, "Linear-1's K");
  p = deepseek(8), p.b_m = 96;
  expect_input_error(p, "b_m");
  p = deepseek(8), p.b_n = 8;
  expect_input_error(p, "b_n");
  p = deepseek(8), p.T_tokens = 0;
  expect_input_error(p, "T (tokens per rank)");
}

TEST(MoeLayout, RegionsDisjointAlignedAndInBounds) {
  for (int P : {1, 2, 4, 8}) {
    const MoeProblem pr = deepseek(P);
    const std::int64_t cap = expected_capacity_rows(pr, 1.25);
    const SymmetricWindow w = plan_window(pr, cap, 16);
    std::vector<Region> regions{w.tokens.region, w.send.counts, w.send.lists, w.dispatch.region, w.dispatch.row_sources,
                                w.ring.region,   w.combine.region, w.counters.region, w.epochs.region};
    std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.offset_bytes < b.offset_bytes; });
    for (std::size_t i = 0; i < regions.size(); ++i) {
      EXPECT_EQ(regions[i].offset_bytes % kTmaAlignBytes, 0);
      EXPECT_GT(regions[i].size_bytes, 0);
      if (i + 1 < regions.size()) EXPECT_LE(regions[i].end_bytes(), regions[i + 1].offset_bytes);
    }
    EXPECT_LE(regions.back().end_bytes(), w.total_bytes);
    for (std::int64_t pitch : {w.tokens.row_pitch_bytes, w.dispatch.row_pitch_bytes, w.ring.row_pitch_bytes, w.combine.row_pitch_bytes})
      EXPECT_EQ(pitch % kStoreAlignBytes, 0);
    // Last element of every indexed region lies inside it.
    const auto inside = [](const Region& r, std::int64_t off, std::int64_t bytes) {
      return off >= r.offset_bytes && off + bytes <= r.end_bytes();
    };
    EXPECT_TRUE(inside(w.tokens.region, w.tokens.token_offset(pr.T_tokens - 1), w.tokens.row_pitch_bytes));
    EXPECT_TRUE(inside(w.send.counts, w.send.count_offset(pr.E_experts - 1), 4));
    EXPECT_TRUE(inside(w.send.lists, w.send.pair_offset(pr.E_experts - 1, pr.T_tokens - 1), 4));
    EXPECT_EQ(w.send.pair_offset(1, 0) - w.send.pair_offset(0, 0), 4LL * pr.T_tokens);
    EXPECT_TRUE(inside(w.dispatch.region, w.dispatch.row_offset(cap - 1), w.dispatch.row_pitch_bytes));
    EXPECT_TRUE(inside(w.dispatch.region, w.dispatch.m_block_offset(w.dispatch.max_scheduler_rows() - 1), pr.b_m * w.dispatch.row_pitch_bytes));
    EXPECT_TRUE(inside(w.dispatch.row_sources, w.dispatch.row_source_offset(cap - 1), sizeof(RowSource)));
    EXPECT_TRUE(inside(w.ring.region, w.ring.l1_tile_offset(15, pr.P1_l1_n_blocks() - 1) + (pr.b_m - 1) * w.ring.row_pitch_bytes,
                       (pr.b_n / 2) * pr.elem_bytes()));
    EXPECT_TRUE(inside(w.combine.region, w.combine.row_offset(pr.T_tokens - 1, pr.top_k - 1), w.combine.row_pitch_bytes));
    EXPECT_TRUE(inside(w.counters.region, w.counters.l2_done(15), 4));
    EXPECT_TRUE(inside(w.epochs.region, w.epochs.peer_finished(P - 1), 4));
  }
}

// fp8: the three scale tensors get their own regions, disjoint from everything, with the last scale of
// each inside; distinct (row, K block) pairs never share a slot; bf16 windows have none.
TEST(MoeLayout, Fp8ScaleRegionsDisjointAndInBounds) {
  for (int P : {1, 2, 8}) {
    MoeProblem pr = deepseek(P);
    pr.dtype = DType::fp8_e4m3;
    pr.b_n = 256;
    const std::int64_t cap = expected_capacity_rows(pr, 1.25);
    const int slots = 16;
    const SymmetricWindow w = plan_window(pr, cap, slots);
    std::vector<Region> regions{w.tokens.region, w.tokens.scales, w.send.counts,   w.send.lists,     w.dispatch.region,
                                w.dispatch.row_sources, w.dispatch.scales, w.ring.region, w.ring.scales, w.combine.region,
                                w.counters.region, w.epochs.region};
    std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.offset_bytes < b.offset_bytes; });
    for (std::size_t i = 0; i < regions.size(); ++i) {
      EXPECT_EQ(regions[i].offset_bytes % kTmaAlignBytes, 0);
      EXPECT_GT(regions[i].size_bytes, 0);
      if (i + 1 < regions.size()) EXPECT_LE(regions[i].end_bytes(), regions[i + 1].offset_bytes);
    }
    const auto inside = [](const Region& r, std::int64_t off) { return off >= r.offset_bytes && off + 4 <= r.end_bytes(); };
    const int kh = pr.h_hidden / 128, ki = pr.h_inter / 128;
    EXPECT_EQ(w.tokens.row_pitch_bytes, pr.h_hidden);
    EXPECT_TRUE(inside(w.tokens.scales, w.tokens.scale_offset(pr.T_tokens - 1, kh - 1)));
    EXPECT_EQ(w.tokens.scale_offset(1, 0) - w.tokens.scale_offset(0, kh - 1), 4);  // row-major, packed
    EXPECT_TRUE(inside(w.dispatch.scales, w.dispatch.scale_offset(cap - 1, kh - 1)));
    EXPECT_EQ(w.dispatch.scale_offset(1, 3) - w.dispatch.scale_offset(0, 3), 4);    // MN-major: rows contiguous
    EXPECT_EQ(w.dispatch.scale_offset(0, 1) - w.dispatch.scale_offset(cap - 1, 0), 4);
    const int last_row = slots * 3 - 1;  // generation 2 of the last slot
    EXPECT_TRUE(inside(w.ring.scales, w.ring.scale_offset(last_row, pr.b_m - 1, ki - 1)));
    EXPECT_EQ(w.ring.scale_offset(5, 0, 2), w.ring.scale_offset(5 + slots, 0, 2));  // a slot's rows share scales
    EXPECT_EQ(w.ring.scale_offset(0, 1, 0) - w.ring.scale_offset(0, 0, 0), 4);
    EXPECT_EQ(w.ring.scale_offset(0, 0, 1) - w.ring.scale_offset(slots - 1, pr.b_m - 1, 0), 4);
  }
  const SymmetricWindow bf16 = plan_window(deepseek(2), expected_capacity_rows(deepseek(2), 1.0), 4);
  EXPECT_EQ(bf16.tokens.scales.size_bytes + bf16.dispatch.scales.size_bytes + bf16.ring.scales.size_bytes, 0);
}

TEST(MoeLayout, CountersAndRingSlotsDoNotAlias) {
  const MoeProblem pr = test::small_problem(2, 4, 2, 300);
  const SymmetricWindow w = plan_window(pr, 1024, 5);
  std::set<std::int64_t> offs;
  for (int p = 0; p < w.counters.max_rows; ++p) offs.insert(w.counters.dispatch_ready(p));
  for (int s = 0; s < 5; ++s) offs.insert(w.counters.l1_done(s)), offs.insert(w.counters.l2_done(s));
  offs.insert(w.counters.combine_arrived());
  offs.insert(w.counters.l1_tiles_run());
  offs.insert(w.counters.l2_tiles_run());
  EXPECT_EQ(static_cast<int>(offs.size()), w.counters.count());
  std::set<std::int64_t> epochs{w.epochs.send_ready()};
  for (int s = 0; s < pr.P_ranks; ++s) epochs.insert(w.epochs.peer_finished(s));
  EXPECT_EQ(static_cast<int>(epochs.size()), w.epochs.count());
  EXPECT_GE(*epochs.begin(), w.counters.region.end_bytes());
  // Ring: rows p and p + S share a slot, generations count the occupants; targets follow.
  EXPECT_EQ(w.ring.row_offset(2, 0), w.ring.row_offset(7, 0));
  EXPECT_NE(w.ring.row_offset(2, 0), w.ring.row_offset(3, 0));
  EXPECT_EQ(w.ring.generation(7), 1);
  EXPECT_EQ(l1_done_target(7, 5, pr.P1_l1_n_blocks()), 2u * pr.P1_l1_n_blocks());
  EXPECT_EQ(slot_free_target(2, 5, pr.P2_l2_n_blocks()), 0u);
  EXPECT_EQ(slot_free_target(7, 5, pr.P2_l2_n_blocks()), 1u * pr.P2_l2_n_blocks());
}

TEST(MoeLayout, DispatchRowsOfARoutingAreDisjointAndInBounds) {
  for (int P : {1, 2, 4, 8}) {
    const MoeProblem pr = test::small_problem(P, 2 * P, 2, 500);
    const auto topk = skewed_routing(pr, 1.0, P);
    const Routing r = build_routing(pr, topk);
    const SymmetricWindow w = plan_window(pr, worst_case_capacity_rows(pr), 4);
    EXPECT_NO_THROW(check_capacity(r, w));
    std::vector<std::set<std::int64_t>> seen(P);
    for (int s = 0; s < P; ++s)
      for (int i = 0; i < static_cast<int>(r.pair_row[s].size()); ++i) {
        const int owner = pr.owner_rank(topk[s].ids[i]);
        const std::int64_t off = w.dispatch.row_offset(r.pair_row[s][i]);
        EXPECT_TRUE(seen[owner].insert(off).second) << "two pairs share a dispatch row on rank " << owner;
        EXPECT_GE(off, w.dispatch.region.offset_bytes);
        EXPECT_LE(off + w.dispatch.row_pitch_bytes, w.dispatch.region.end_bytes());
        EXPECT_LT(r.pair_row[s][i], r.rows_used(owner));
      }
  }
}

TEST(MoeLayout, CapacityOverflowIsAClearInputError) {
  const MoeProblem pr = test::small_problem(2, 4, 2, 500);
  // Everything to expert 0 and 1 (rank 0): rank 0 gets 2·500·2 = 2000 rows = 16 m-blocks of 128 = 2048.
  std::vector<RankTopK> topk(2);
  for (RankTopK& r : topk) {
    r.tokens = 500;
    for (int t = 0; t < 500; ++t) r.ids.insert(r.ids.end(), {0, 1}), r.weights.insert(r.weights.end(), {0.5f, 0.5f});
  }
  const Routing r = build_routing(pr, topk);
  EXPECT_EQ(r.rows_used(0), 2048);
  const SymmetricWindow small = plan_window(pr, expected_capacity_rows(pr, 1.0), 2);
  try {
    check_capacity(r, small);
    FAIL() << "expected a capacity error";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2048 rows"), std::string::npos) << msg;
    EXPECT_NE(msg.find("raise the capacity"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(check_capacity(r, plan_window(pr, worst_case_capacity_rows(pr), 2)));
  EXPECT_GE(worst_case_capacity_rows(pr), 2048);
  EXPECT_THROW(plan_window(pr, 100, 2), InputError);  // not a multiple of b_m
  EXPECT_THROW(plan_window(pr, 128, 0), InputError);
}

TEST(MoeLayout, L1WeightInterleavingIsABijectionPairingGateWithUp) {
  const int b_n = 128, h_inter = 512;
  std::set<int> rows;
  for (int n = 0; n < 2 * h_inter / b_n; ++n)
    for (int c = 0; c < b_n; ++c) {
      const int row = l1_logical_row(n, c, b_n, h_inter);
      EXPECT_TRUE(rows.insert(row).second);
      if (c < b_n / 2) EXPECT_EQ(l1_logical_row(n, c + b_n / 2, b_n, h_inter), row + h_inter);  // its up partner
    }
  EXPECT_EQ(static_cast<int>(rows.size()), 2 * h_inter);
  EXPECT_EQ(*rows.rbegin(), 2 * h_inter - 1);
}

TEST(MoeLayout, DeepSeekV3SizesAsDocumented) {
  // docs/MOE.md quotes these numbers.
  const MoeProblem p2 = deepseek(2), p8 = deepseek(8);
  EXPECT_EQ(p8.h_hidden * 2, 14336);                                            // bytes per token row
  EXPECT_EQ(expected_capacity_rows(p8, 1.0), 36864);                             // 32768 + 32·127 -> b_m
  EXPECT_EQ(expected_capacity_rows(p2, 1.0), 49024);                             // 32768 + 128·127
  EXPECT_EQ(worst_case_capacity_rows(p8), 266240);                               // 8·4096·8 + 32·127 -> b_m
  const SymmetricWindow w8 = plan_window(p8, expected_capacity_rows(p8, 1.0), 64);
  EXPECT_EQ(w8.combine.region.size_bytes, 4096LL * 8 * 7168 * 2);                // 448 MiB
  EXPECT_EQ(w8.ring.region.size_bytes, 64LL * 128 * 2048 * 2);                    // 32 MiB
}

}  // namespace
}  // namespace xstage::moe
