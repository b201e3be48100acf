#include "moe/baseline/alltoall_plan.hpp"

#include <algorithm>
#include <string>

#include "common/error.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

std::int64_t AllToAllPlan::rows_sent_to_peers() const {
  std::int64_t rows = 0;
  for (std::size_t p = 0; p < send_counts.size(); ++p)
    if (static_cast<int>(p) != rank) rows += send_counts[p] + recv_counts[p];
  return rows;
}

std::vector<int> count_row(const MoeProblem& pr, int tokens, const std::int32_t* ids) {
  std::vector<int> row(pr.E_experts, 0);
  for (std::int64_t q = 0; q < static_cast<std::int64_t>(tokens) * pr.top_k; ++q) {
    const int e = ids[q];
    // Messages are built only on failure: this runs per pair on every forward of the unfused layer.
    if (e < 0 || e >= pr.E_experts)
      throw InputError("top-k id " + std::to_string(e) + " of pair " + std::to_string(q) + " is outside [0, " +
                       std::to_string(pr.E_experts) + ")");
    ++row[e];
  }
  return row;
}

std::int64_t max_rows_received(const MoeProblem& pr) {
  return static_cast<std::int64_t>(pr.P_ranks) * pr.T_tokens * std::min(pr.top_k, pr.E_local());
}

AllToAllPlan build_alltoall_plan(const MoeProblem& pr, int rank, const std::vector<int>& counts, int tokens,
                                 const std::int32_t* ids) {
  validate(pr);
  const int P = pr.P_ranks, E = pr.E_experts, EL = pr.E_local(), k = pr.top_k;
  XSTAGE_REQUIRE(rank >= 0 && rank < P, "alltoall plan: rank " + std::to_string(rank) + " outside [0, P)");
  XSTAGE_REQUIRE(counts.size() == static_cast<std::size_t>(P) * E, "alltoall plan: the count matrix must be [P][E]");
  XSTAGE_REQUIRE(tokens >= 0 && tokens <= pr.T_tokens, "alltoall plan: tokens must be in [0, T]");
  const std::vector<int> own = count_row(pr, tokens, ids);
  for (int e = 0; e < E; ++e)
    if (own[e] != counts[count_index(rank, e, E)])
      throw InputError("alltoall plan: rank " + std::to_string(rank) + " sends " + std::to_string(own[e]) +
                       " pairs to expert " + std::to_string(e) + " but the exchanged counts say " +
                       std::to_string(counts[count_index(rank, e, E)]));
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j)
      for (int i = 0; i < j; ++i)
        if (ids[t * k + i] == ids[t * k + j])
          throw InputError("token " + std::to_string(t) + " names expert " + std::to_string(ids[t * k + j]) + " twice");

  AllToAllPlan plan;
  plan.rank = rank;
  plan.send_counts.assign(P, 0);
  plan.recv_counts.assign(P, 0);
  plan.send_displs.assign(P, 0);
  plan.recv_displs.assign(P, 0);
  for (int d = 0; d < P; ++d)
    for (int e = 0; e < EL; ++e) {
      plan.send_counts[d] += counts[count_index(rank, pr.global_expert(d, e), E)];
      plan.recv_counts[d] += counts[count_index(d, pr.global_expert(rank, e), E)];
    }
  for (int d = 1; d < P; ++d) {
    plan.send_displs[d] = plan.send_displs[d - 1] + plan.send_counts[d - 1];
    plan.recv_displs[d] = plan.recv_displs[d - 1] + plan.recv_counts[d - 1];
  }

  // Send order: destination, its local expert, token, k. Experts are owner-contiguous (global id =
  // owner·E_local + local), so this is global expert order; a running cursor per expert places each pair.
  std::vector<std::int64_t> cursor(E, 0);
  for (std::int64_t acc = 0, e = 0; e < E; ++e) {
    cursor[e] = acc;
    acc += counts[count_index(rank, static_cast<int>(e), E)];
  }
  plan.send_token.assign(plan.rows_sent(), -1);
  plan.pair_send_row.assign(static_cast<std::size_t>(tokens) * k, -1);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) {
      const std::int64_t row = cursor[ids[t * k + j]]++;
      plan.send_token[row] = t;
      plan.pair_send_row[t * k + j] = static_cast<std::int32_t>(row);
    }

  // Owner side: the receive buffer holds, per source s, [local expert][rows]; the expert-major buffer
  // holds, per local expert, [source][rows].
  plan.expert_rows.assign(EL, 0);
  plan.expert_first_row.assign(EL + 1, 0);
  for (int e = 0; e < EL; ++e) {
    for (int s = 0; s < P; ++s) plan.expert_rows[e] += counts[count_index(s, pr.global_expert(rank, e), E)];
    plan.expert_first_row[e + 1] = plan.expert_first_row[e] + plan.expert_rows[e];
  }
  const std::int64_t rows = plan.rows_received();
  plan.expert_row_to_recv_row.assign(rows, -1);
  plan.recv_row_to_expert_row.assign(rows, -1);
  std::vector<std::int64_t> expert_cursor(plan.expert_first_row.begin(), plan.expert_first_row.end() - 1);
  for (int s = 0; s < P; ++s) {
    std::int64_t recv_row = plan.recv_displs[s];
    for (int e = 0; e < EL; ++e) {
      const int n = counts[count_index(s, pr.global_expert(rank, e), E)];
      for (int i = 0; i < n; ++i, ++recv_row) {
        const std::int64_t expert_row = expert_cursor[e]++;
        plan.expert_row_to_recv_row[expert_row] = static_cast<std::int32_t>(recv_row);
        plan.recv_row_to_expert_row[recv_row] = static_cast<std::int32_t>(expert_row);
      }
    }
  }
  return plan;
}

}  // namespace xstage::moe
