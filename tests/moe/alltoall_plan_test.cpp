// The unfused layer's all-to-all index math for any P: every pair travels to its owner's expert rows and
// its expert output comes back to the row it left from, through the counts and displacements alone.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

#include "common/error.hpp"
#include "moe/baseline/alltoall_plan.hpp"
#include "moe/problem/routing.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

struct Pair {
  int source = -1, token = -1, expert = -1;
  bool operator==(const Pair&) const = default;
};

// Routes every rank's pairs through the plans, as the NCCL exchanges and gather kernels would.
void check_round_trip(const MoeProblem& pr, const std::vector<RankTopK>& topk) {
  const int P = pr.P_ranks, k = pr.top_k, EL = pr.E_local();
  std::vector<int> counts;
  for (int s = 0; s < P; ++s) {
    const auto row = count_row(pr, topk[s].tokens, topk[s].ids.data());
    counts.insert(counts.end(), row.begin(), row.end());
  }
  std::vector<AllToAllPlan> plans;
  for (int r = 0; r < P; ++r) plans.push_back(build_alltoall_plan(pr, r, counts, topk[r].tokens, topk[r].ids.data()));

  // Send buffers: the pair each row carries.
  std::vector<std::vector<Pair>> send(P);
  for (int s = 0; s < P; ++s) {
    const auto& pl = plans[s];
    send[s].assign(pl.rows_sent(), Pair{});
    for (std::int64_t row = 0; row < pl.rows_sent(); ++row) {
      const int t = pl.send_token[row];
      ASSERT_GE(t, 0);
      send[s][row].source = s;
      send[s][row].token = t;
    }
    for (int t = 0; t < topk[s].tokens; ++t)
      for (int j = 0; j < k; ++j) {
        const auto row = pl.pair_send_row[t * k + j];
        ASSERT_GE(row, 0);
        ASSERT_EQ(send[s][row].token, t);
        send[s][row].expert = topk[s].ids[t * k + j];
      }
    // Rows to owner d are exactly the pairs whose expert d owns.
    for (int d = 0; d < P; ++d)
      for (std::int64_t i = 0; i < pl.send_counts[d]; ++i)
        ASSERT_EQ(pr.owner_rank(send[s][pl.send_displs[d] + i].expert), d);
  }
  // Dispatch exchange: owner r receives from s the chunk at s's send_displs[r]; sizes must agree.
  std::vector<std::vector<Pair>> expert_major(P);
  std::vector<std::vector<Pair>> back_send(P);
  for (int r = 0; r < P; ++r) {
    const auto& pl = plans[r];
    std::vector<Pair> recv(pl.rows_received());
    for (int s = 0; s < P; ++s) {
      ASSERT_EQ(pl.recv_counts[s], plans[s].send_counts[r]);
      for (std::int64_t i = 0; i < pl.recv_counts[s]; ++i) recv[pl.recv_displs[s] + i] = send[s][plans[s].send_displs[r] + i];
    }
    expert_major[r].resize(pl.rows_received());
    for (std::int64_t row = 0; row < pl.rows_received(); ++row) {
      expert_major[r][row] = recv[pl.expert_row_to_recv_row[row]];
      ASSERT_EQ(pl.recv_row_to_expert_row[pl.expert_row_to_recv_row[row]], row);
    }
    // Expert-major order: local expert, then source, then token (docs/MOE.md's dispatch order).
    ASSERT_EQ(pl.expert_first_row[EL], pl.rows_received());
    for (int e = 0; e < EL; ++e)
      for (std::int64_t row = pl.expert_first_row[e]; row < pl.expert_first_row[e + 1]; ++row) {
        const Pair& p = expert_major[r][row];
        ASSERT_EQ(p.expert, pr.global_expert(r, e));
        if (row > pl.expert_first_row[e]) {
          const Pair& q = expert_major[r][row - 1];
          ASSERT_LT(std::tie(q.source, q.token), std::tie(p.source, p.token));
        }
      }
    // The expert "output" of a row is its pair; gather back into receive order.
    back_send[r].resize(pl.rows_received());
    for (std::int64_t i = 0; i < pl.rows_received(); ++i) back_send[r][i] = expert_major[r][pl.recv_row_to_expert_row[i]];
  }
  // Combine exchange (transposed counts): source s receives from owner d at its own send_displs[d].
  for (int s = 0; s < P; ++s) {
    const auto& pl = plans[s];
    std::vector<Pair> back(pl.rows_sent());
    for (int d = 0; d < P; ++d)
      for (std::int64_t i = 0; i < pl.send_counts[d]; ++i) back[pl.send_displs[d] + i] = back_send[d][plans[d].recv_displs[s] + i];
    for (int t = 0; t < topk[s].tokens; ++t)
      for (int j = 0; j < k; ++j) {
        const Pair want{s, t, topk[s].ids[t * k + j]};
        ASSERT_EQ(back[pl.pair_send_row[t * k + j]], want) << "source " << s << " token " << t << " j " << j;
      }
  }
  // Traffic: what leaves a rank for peers in the dispatch comes back to the other ranks in the combine.
  std::int64_t peer_rows = 0, cross_pairs = 0;
  for (int r = 0; r < P; ++r) peer_rows += plans[r].rows_sent_to_peers();
  for (int s = 0; s < P; ++s)
    for (int q = 0; q < topk[s].tokens * k; ++q) cross_pairs += pr.owner_rank(topk[s].ids[q]) != s;
  EXPECT_EQ(peer_rows, 2 * cross_pairs);
}

TEST(AllToAllPlan, RoundTripForAnyRankCount) {
  for (int P : {1, 2, 3, 4, 8}) {
    for (int k : {1, 2, 3, 8}) {
      MoeProblem pr = test::small_problem(P, 8 * P, k, 77);
      check_round_trip(pr, balanced_routing(pr, 11 + P));
      check_round_trip(pr, skewed_routing(pr, 1.3, 23 + k));
      check_round_trip(pr, skewed_routing(pr, 4.0, 5));  // nearly every pair to one hot expert
    }
  }
}

TEST(AllToAllPlan, EmptyExpertsRanksAndTokens) {
  MoeProblem pr = test::small_problem(4, 64, 1, 3);  // 12 pairs over 64 experts: most experts empty
  check_round_trip(pr, balanced_routing(pr, 3));
  auto topk = balanced_routing(pr, 4);
  topk[2].tokens = 0;  // a rank with no tokens this call
  topk[2].ids.clear();
  topk[2].weights.clear();
  check_round_trip(pr, topk);
  // All pairs to experts of rank 0: ranks 1..3 receive nothing.
  for (auto& r : topk)
    for (auto& id : r.ids) id = 0;
  check_round_trip(pr, topk);
}

TEST(AllToAllPlan, CountsAndDisplacementsByHand) {
  // P = 3, E = 6 (2 per rank), k = 2; rank 1's tokens: {0, 5}, {3, 2}.
  MoeProblem pr = test::small_problem(3, 6, 2, 2);
  std::vector<int> counts = {1, 0, 1, 0, 1, 1,   // rank 0
                             1, 0, 1, 1, 0, 1,   // rank 1
                             0, 2, 0, 0, 2, 0};  // rank 2
  const std::vector<std::int32_t> ids = {0, 5, 3, 2};
  const AllToAllPlan pl = build_alltoall_plan(pr, 1, counts, 2, ids.data());
  EXPECT_EQ(pl.send_counts, (std::vector<std::int64_t>{1, 2, 1}));
  EXPECT_EQ(pl.send_displs, (std::vector<std::int64_t>{0, 1, 3}));
  EXPECT_EQ(pl.recv_counts, (std::vector<std::int64_t>{1, 2, 0}));  // experts 2, 3 from each source
  EXPECT_EQ(pl.recv_displs, (std::vector<std::int64_t>{0, 1, 3}));
  EXPECT_EQ(pl.send_token, (std::vector<std::int32_t>{0, 1, 1, 0}));  // experts 0 | 2, 3 | 5
  EXPECT_EQ(pl.pair_send_row, (std::vector<std::int32_t>{0, 3, 2, 1}));
  EXPECT_EQ(pl.expert_rows, (std::vector<std::int64_t>{2, 1}));       // expert 2: ranks 0, 1; expert 3: rank 1
  EXPECT_EQ(pl.expert_row_to_recv_row, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(pl.rows_sent_to_peers(), 2 + 1);  // dispatch: 1 to rank 0, 1 to rank 2; combine: 1 back to rank 0
}

TEST(AllToAllPlan, RejectsCountsThatDisagreeWithIds) {
  MoeProblem pr = test::small_problem(2, 4, 1, 2);
  const std::vector<std::int32_t> ids = {0, 3};
  EXPECT_THROW(build_alltoall_plan(pr, 0, {1, 0, 0, 0, 0, 0, 0, 0}, 2, ids.data()), InputError);
  EXPECT_THROW(build_alltoall_plan(pr, 0, {1, 0, 0, 1, 0, 0, 0, 0}, 3, ids.data()), InputError);
  const std::vector<std::int32_t> bad = {0, 9};
  EXPECT_THROW(build_alltoall_plan(pr, 0, {1, 0, 0, 1, 0, 0, 0, 0}, 2, bad.data()), InputError);
  MoeProblem pr2 = test::small_problem(2, 4, 2, 1);
  const std::vector<std::int32_t> twice = {1, 1};
  EXPECT_THROW(build_alltoall_plan(pr2, 0, {0, 2, 0, 0, 0, 0, 0, 0}, 1, twice.data()), InputError);
}

}  // namespace
}  // namespace xstage::moe
