#include "moe/problem/layout.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"

namespace xstage::moe {

namespace {
std::string s(long long v) { return std::to_string(v); }
}  // namespace

std::int64_t worst_case_capacity_rows(const MoeProblem& pr) {
  validate(pr);
  const std::int64_t pairs = static_cast<std::int64_t>(pr.P_ranks) * pr.T_tokens * std::min(pr.top_k, pr.E_local());
  return round_up(pairs + static_cast<std::int64_t>(pr.E_local()) * (pr.b_m - 1), pr.b_m);
}

std::int64_t expected_capacity_rows(const MoeProblem& pr, double slack) {
  validate(pr);
  XSTAGE_REQUIRE(std::isfinite(slack) && slack >= 1.0, "dispatch capacity: slack must be >= 1");
  const double balanced = static_cast<double>(pr.T_tokens) * pr.top_k;
  const std::int64_t rows = static_cast<std::int64_t>(std::ceil(balanced * slack)) +
                            static_cast<std::int64_t>(pr.E_local()) * (pr.b_m - 1);
  return std::min(round_up(rows, pr.b_m), worst_case_capacity_rows(pr));
}

SymmetricWindow plan_window(const MoeProblem& pr, std::int64_t capacity_rows, int ring_slots) {
  validate(pr);
  XSTAGE_REQUIRE(capacity_rows > 0 && capacity_rows % pr.b_m == 0,
                 "dispatch capacity: " + s(capacity_rows) + " rows must be a positive multiple of b_m = " + s(pr.b_m));
  XSTAGE_REQUIRE(capacity_rows / pr.b_m <= (1LL << 30), "dispatch capacity: too many rows (" + s(capacity_rows) + ")");
  XSTAGE_REQUIRE(ring_slots >= 1, "intermediate ring: needs at least one slot (got " + s(ring_slots) + ")");
  return window_layout(pr, capacity_rows, ring_slots);
}

void check_capacity(const Routing& r, const SymmetricWindow& w) {
  for (int owner = 0; owner < r.problem.P_ranks; ++owner) {
    const std::int64_t need = r.rows_used(owner);
    if (!w.dispatch.fits(need))
      throw InputError("dispatch capacity exceeded: rank " + s(owner) + " receives rows for " + s(r.scheduler_rows(owner)) +
                       " m-blocks = " + s(need) + " rows (padded to b_m per expert), but its dispatch buffer holds " +
                       s(w.dispatch.capacity_rows) + " rows; raise the capacity (worst case, always enough: " +
                       s(worst_case_capacity_rows(r.problem)) + " rows)");
  }
}

}  // namespace xstage::moe
