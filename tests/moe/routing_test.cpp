// Routing: counts, offsets and dispatch positions against a direct recomputation, the generators, and
// bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "common/error.hpp"
#include "moe/problem/routing.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

// Recomputes every position the slow, obvious way: walk the owner's experts, then sources, tokens, k.
void expect_routing_consistent(const MoeProblem& pr, const std::vector<RankTopK>& topk, const Routing& r) {
  const int P = pr.P_ranks, E = pr.E_experts, k = pr.top_k;
  for (int s = 0; s < P; ++s)
    for (int e = 0; e < E; ++e) {
      int n = 0;
      for (int t = 0; t < topk[s].tokens; ++t)
        for (int j = 0; j < k; ++j) n += topk[s].ids[t * k + j] == e;
      ASSERT_EQ(r.count(s, e), n) << "count s=" << s << " e=" << e;
    }
  for (int e = 0; e < E; ++e) {
    int total = 0;
    for (int s = 0; s < P; ++s) total += r.count(s, e);
    EXPECT_EQ(r.expert_rows[e], total);
  }
  for (int owner = 0; owner < P; ++owner) {
    std::int64_t row = 0;
    std::set<std::int64_t> used;
    for (int el = 0; el < pr.E_local(); ++el) {
      const int e = pr.global_expert(owner, el);
      ASSERT_EQ(r.owner_first_row(owner)[el] * static_cast<std::int64_t>(pr.b_m), row) << "O_e of expert " << e;
      std::int64_t next = row;
      for (int s = 0; s < P; ++s)
        for (int t = 0; t < topk[s].tokens; ++t)
          for (int j = 0; j < k; ++j)
            if (topk[s].ids[t * k + j] == e) {
              ASSERT_EQ(r.pair_row[s][t * k + j], next) << "pair (s=" << s << ", t=" << t << ", j=" << j << ")";
              const RowSource src = r.row_source[owner][next];
              EXPECT_EQ(src.rank, s);
              EXPECT_EQ(src.pair, t * k + j);
              used.insert(next++);
            }
      EXPECT_EQ(next - row, r.expert_rows[e]);
      for (std::int64_t pad = next; pad < row + round_up(r.expert_rows[e], pr.b_m); ++pad)
        EXPECT_FALSE(r.row_source[owner][pad].valid()) << "padding row " << pad << " has a source";
      row += round_up(r.expert_rows[e], pr.b_m);
    }
    EXPECT_EQ(r.rows_used(owner), row);
    EXPECT_EQ(static_cast<std::int64_t>(used.size()),
              std::accumulate(r.expert_rows.begin() + pr.global_expert(owner, 0),
                              r.expert_rows.begin() + pr.global_expert(owner, 0) + pr.E_local(), std::int64_t{0}));
    // valid_rows: b_m for full blocks, the remainder for an expert's last block; sums to the pairs.
    std::int64_t valid = 0;
    for (int p = 0; p < r.scheduler_rows(owner); ++p) {
      const int v = r.valid_rows(owner, p);
      EXPECT_GT(v, 0);
      EXPECT_LE(v, pr.b_m);
      valid += v;
    }
    EXPECT_EQ(valid, static_cast<std::int64_t>(used.size()));
  }
}

TEST(MoeRouting, CountsOffsetsAndPositionsForP1To8) {
  for (int P : {1, 2, 4, 8})
    for (double zipf : {0.0, 1.3}) {
      MoeProblem pr = test::small_problem(P, 4 * P, std::min(4, 4 * P), 150 + 17 * P);
      const auto topk = zipf == 0.0 ? balanced_routing(pr, 3) : skewed_routing(pr, zipf, 3);
      SCOPED_TRACE("P=" + std::to_string(P) + " zipf=" + std::to_string(zipf));
      expect_routing_consistent(pr, topk, build_routing(pr, topk));
    }
}

TEST(MoeRouting, FewerTokensThanCapacityAndAnEmptyRank) {
  MoeProblem pr = test::small_problem(2, 4, 2, 100);
  auto topk = skewed_routing(pr, 0.5, 9);
  topk[0].tokens = 37;
  topk[0].ids.resize(37 * 2);
  topk[0].weights.resize(37 * 2);
  topk[1] = RankTopK{};
  const Routing r = build_routing(pr, topk);
  expect_routing_consistent(pr, topk, r);
  EXPECT_EQ(r.tokens[0], 37);
  EXPECT_EQ(r.tokens[1], 0);
}

TEST(MoeRouting, DeviceIndexMathMatchesHandComputation) {
  // P = 2, E = 4 (2 per rank), b_m = 64 (as a number only). counts[s][e]:
  //   s=0: 70 0 5 1      s=1: 10 0 0 64
  // Owner 0: expert 0 has 80 rows -> 2 m-blocks, expert 1 none: O = {0, 2, 2}.
  // Owner 1: expert 2: 5 rows -> 1 block; expert 3: 65 rows -> 2 blocks: O = {0, 1, 3}.
  MoeProblem pr = test::small_problem(2, 4, 1, 200);
  pr.b_m = 64;
  const int counts[] = {70, 0, 5, 1, 10, 0, 0, 64};
  int O0[3], O1[3];
  expert_first_rows(counts, pr, 0, O0);
  expert_first_rows(counts, pr, 1, O1);
  EXPECT_EQ((std::vector<int>{O0[0], O0[1], O0[2]}), (std::vector<int>{0, 2, 2}));
  EXPECT_EQ((std::vector<int>{O1[0], O1[1], O1[2]}), (std::vector<int>{0, 1, 3}));
  // Source 1's 4th pair to expert 0 sits after source 0's 70: row 0·64 + 70 + 3.
  EXPECT_EQ(dispatch_row(counts, O0, pr, 0, 1, 3), 73);
  // Source 1's first pair to expert 3: O = 1 -> row 64, after source 0's 1 pair: 65.
  EXPECT_EQ(dispatch_row(counts, O1, pr, 3, 1, 0), 65);
  EXPECT_EQ(source_run_offset(counts, pr, 3, 0), 0);
  EXPECT_EQ(m_blocks(0, 64), 0);
  EXPECT_EQ(m_blocks(64, 64), 1);
  EXPECT_EQ(m_blocks(65, 64), 2);
}

TEST(MoeRouting, BalancedGeneratorIsBalancedAndDistinct) {
  MoeProblem pr = test::small_problem(4, 32, 6, 333);
  const Routing r = build_routing(pr, balanced_routing(pr, 5));  // build_routing rejects repeated ids
  const auto [lo, hi] = std::minmax_element(r.expert_rows.begin(), r.expert_rows.end());
  EXPECT_LE(*hi - *lo, 1);
  EXPECT_EQ(std::accumulate(r.expert_rows.begin(), r.expert_rows.end(), 0), 4 * 333 * 6);
}

TEST(MoeRouting, SkewedGeneratorIsSkewedSeededAndNormalised) {
  MoeProblem pr = test::small_problem(2, 64, 4, 2000);
  const auto a = skewed_routing(pr, 1.3, 42), b = skewed_routing(pr, 1.3, 42), c = skewed_routing(pr, 1.3, 43);
  EXPECT_EQ(a[1].ids, b[1].ids);
  EXPECT_NE(a[1].ids, c[1].ids);
  const Routing r = build_routing(pr, a);
  const int most = *std::max_element(r.expert_rows.begin(), r.expert_rows.end());
  const double mean = 2.0 * 2000 * 4 / 64;
  EXPECT_GT(most, 4 * mean) << "Zipf 1.3 should make a hot expert";
  for (int t = 0; t < 2000; ++t) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) {
      EXPECT_GT(a[0].weights[t * 4 + j], 0.0f);
      sum += a[0].weights[t * 4 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(MoeRouting, BadInputIsAnInputError) {
  MoeProblem pr = test::small_problem(2, 4, 2, 10);
  auto ok = balanced_routing(pr, 1);
  EXPECT_THROW(build_routing(pr, std::vector<RankTopK>(ok.begin(), ok.begin() + 1)), InputError);  // one rank missing
  auto bad = ok;
  bad[1].ids[3] = 4;  // expert out of range
  EXPECT_THROW(build_routing(pr, bad), InputError);
  bad = ok;
  bad[0].ids[1] = bad[0].ids[0];  // the same expert twice in one token
  EXPECT_THROW(build_routing(pr, bad), InputError);
  bad = ok;
  bad[0].tokens = 11;  // more tokens than T
  EXPECT_THROW(build_routing(pr, bad), InputError);
  bad = ok;
  bad[0].ids.pop_back();
  EXPECT_THROW(build_routing(pr, bad), InputError);
  EXPECT_THROW(skewed_routing(pr, -1.0, 1), InputError);
}

}  // namespace
}  // namespace xstage::moe
