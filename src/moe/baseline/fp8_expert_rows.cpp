#include "moe/baseline/fp8_expert_rows.hpp"

#include <string>

#include "common/error.hpp"

namespace xstage::moe {

Fp8ExpertRows pad_expert_rows(const AllToAllPlan& plan) {
  const int EL = static_cast<int>(plan.expert_rows.size());
  XSTAGE_REQUIRE(plan.expert_first_row.size() == static_cast<std::size_t>(EL) + 1,
                 "fp8 expert rows: the plan needs E_local + 1 expert offsets");
  Fp8ExpertRows out;
  out.first.assign(EL + 1, 0);
  for (int e = 0; e < EL; ++e) {
    const std::int64_t next = out.first[e] + (plan.expert_rows[e] + 3) / 4 * 4;
    XSTAGE_REQUIRE(next <= INT32_MAX, "fp8 expert rows: more than 2^31 padded rows");
    out.first[e + 1] = static_cast<std::int32_t>(next);
  }
  out.padded_to_recv.assign(out.total(), -1);
  out.recv_to_padded.assign(plan.expert_row_to_recv_row.size(), -1);
  for (int e = 0; e < EL; ++e)
    for (std::int64_t i = 0; i < plan.expert_rows[e]; ++i) {
      const std::int64_t unpadded = plan.expert_first_row[e] + i, padded = out.first[e] + i;
      const std::int32_t recv = plan.expert_row_to_recv_row[unpadded];
      out.padded_to_recv[padded] = recv;
      out.recv_to_padded[recv] = static_cast<std::int32_t>(padded);
    }
  return out;
}

std::int64_t max_fp8_expert_rows(const MoeProblem& pr) { return max_rows_received(pr) + 3LL * pr.E_local(); }

}  // namespace xstage::moe
