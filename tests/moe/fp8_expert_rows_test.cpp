// The unfused fp8 layer's padded expert-major rows and cuBLASLt's per-expert VEC128 scale layout: every real
// row keeps its plan order, experts start on multiples of 4, and the stacked scale tensors are exactly
// quantize.hpp's activation layout per expert, tiling [0, L·total) without overlap.
#include <gtest/gtest.h>

#include <vector>

#include "moe/baseline/alltoall_plan.hpp"
#include "moe/baseline/fp8_expert_rows.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe {
namespace {

MoeProblem problem(int P, int E, int k, int T) {
  MoeProblem pr;
  pr.P_ranks = P;
  pr.E_experts = E;
  pr.top_k = k;
  pr.h_hidden = 256;
  pr.h_inter = 128;
  pr.T_tokens = T;
  pr.dtype = DType::fp8_e4m3;
  return pr;
}

std::vector<AllToAllPlan> plans_for(const MoeProblem& pr, const std::vector<RankTopK>& topk) {
  std::vector<int> counts;
  for (int s = 0; s < pr.P_ranks; ++s) {
    const auto row = count_row(pr, topk[s].tokens, topk[s].ids.data());
    counts.insert(counts.end(), row.begin(), row.end());
  }
  std::vector<AllToAllPlan> plans;
  for (int r = 0; r < pr.P_ranks; ++r) plans.push_back(build_alltoall_plan(pr, r, counts, topk[r].tokens, topk[r].ids.data()));
  return plans;
}

void check_padding(const MoeProblem& pr, const AllToAllPlan& plan) {
  const Fp8ExpertRows rows = pad_expert_rows(plan);
  const int EL = pr.E_local();
  ASSERT_EQ(rows.first.size(), static_cast<std::size_t>(EL + 1));
  EXPECT_EQ(rows.first[0], 0);
  for (int e = 0; e < EL; ++e) {
    EXPECT_EQ(rows.first[e] % 4, 0);
    EXPECT_EQ(rows.first[e + 1] - rows.first[e], (plan.expert_rows[e] + 3) / 4 * 4);
    for (std::int64_t i = 0; i < rows.first[e + 1] - rows.first[e]; ++i) {
      const std::int64_t p = rows.first[e] + i;
      EXPECT_EQ(expert_of_padded_row(rows.first.data(), EL, p), e) << "padded row " << p;
      if (i < plan.expert_rows[e]) {  // real rows in the plan's order
        const std::int32_t recv = plan.expert_row_to_recv_row[plan.expert_first_row[e] + i];
        EXPECT_EQ(rows.padded_to_recv[p], recv);
        EXPECT_EQ(rows.recv_to_padded[recv], p);
      } else {
        EXPECT_EQ(rows.padded_to_recv[p], -1);
      }
    }
  }
  EXPECT_LE(rows.total(), max_fp8_expert_rows(pr));
  ASSERT_EQ(rows.recv_to_padded.size(), static_cast<std::size_t>(plan.rows_received()));
  for (std::int32_t p : rows.recv_to_padded) EXPECT_GE(p, 0);

  for (int L : {1, 2, 3, 56}) {
    std::vector<int> hits(static_cast<std::size_t>(L * rows.total()), 0);
    for (int e = 0; e < EL; ++e) {
      const int n_e = rows.first[e + 1] - rows.first[e];
      EXPECT_EQ(L * rows.first[e] % 4, 0) << "16-byte aligned start of expert " << e;
      for (int r = 0; r < n_e; ++r)
        for (int kb = 0; kb < L; ++kb) {
          const std::int64_t idx = vec128_scale_index(rows.first.data(), e, L, rows.first[e] + r, kb);
          // quantize.hpp's activation layout of the expert: [K/128][round_up(rows, 4)], N-major.
          EXPECT_EQ(idx - static_cast<std::int64_t>(L) * rows.first[e], static_cast<std::int64_t>(kb) * n_e + r);
          ASSERT_GE(idx, 0);
          ASSERT_LT(idx, static_cast<std::int64_t>(hits.size()));
          ++hits[static_cast<std::size_t>(idx)];
        }
    }
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}

TEST(Fp8ExpertRows, PaddedRowsKeepThePlanOrderAndScalesTileTheirTensor) {
  for (int P : {1, 2, 4}) {
    const MoeProblem skewed = problem(P, 16, 3, 37);
    for (const auto& plan : plans_for(skewed, skewed_routing(skewed, 1.2, 7))) check_padding(skewed, plan);
    const MoeProblem balanced = problem(P, 8, 2, 50);
    for (const auto& plan : plans_for(balanced, balanced_routing(balanced, 3))) check_padding(balanced, plan);
    const MoeProblem sparse = problem(P, 64, 5, 3);  // most experts get no rows
    for (const auto& plan : plans_for(sparse, balanced_routing(sparse, 11))) check_padding(sparse, plan);
  }
}

TEST(Fp8ExpertRows, ExpertLookupSkipsEmptyExperts) {
  const std::vector<std::int32_t> first = {0, 4, 4, 4, 12, 12};  // experts 1, 2 and 4 are empty
  EXPECT_EQ(expert_of_padded_row(first.data(), 5, 0), 0);
  EXPECT_EQ(expert_of_padded_row(first.data(), 5, 3), 0);
  EXPECT_EQ(expert_of_padded_row(first.data(), 5, 4), 3);
  EXPECT_EQ(expert_of_padded_row(first.data(), 5, 11), 3);
}

}  // namespace
}  // namespace xstage::moe
