#include "moe/plan.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "common/error.hpp"
#include "moe/schedule/auto_schedule.hpp"
#include "moe/schedule/schedule_host.hpp"
#include "moe/schedule/scheduler.hpp"

namespace xstage::moe {
namespace {

std::string s(long long v) { return std::to_string(v); }

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The rule of why_not, throwing InputError; `K_SM` 0: the device is not known.
void check(const MoeLayerRequest& r, int K_SM) {
  const MoeProblem& pr = r.problem;
  XSTAGE_REQUIRE(pr.P_ranks >= 1 && pr.P_ranks <= kMaxEpRanks,
                 "MegaMoE: the layer runs on 1 to " + s(kMaxEpRanks) + " ranks (one NVLink domain); got P = " + s(pr.P_ranks));
  validate(pr);
  XSTAGE_REQUIRE(pr.b_m == 128 && (pr.b_n == 128 || pr.b_n == 256),
                 "MegaMoE: the fused kernel uses 128 x 128 or 128 x 256 tiles (got " + s(pr.b_m) + " x " + s(pr.b_n) + ")");
  XSTAGE_REQUIRE(pr.dtype == DType::bf16 || pr.b_n == 256,
                 "MegaMoE fp8: the fused fp8 kernel needs 256-wide tiles, so that each Linear-1 tile owns whole 128-column "
                 "activation scale blocks: h a multiple of 128 and 2·h_inter a multiple of 256 (got h = " + s(pr.h_hidden) +
                     ", h_inter = " + s(pr.h_inter) + ", b_n = " + s(pr.b_n) + ")");
  XSTAGE_REQUIRE(pr.E_local() <= kMegaMoeMaxLocalExperts && pr.P_ranks * pr.E_local() <= kMegaMoeMaxCounts,
                 "MegaMoE: " + s(pr.E_local()) + " experts per rank is more than the kernel's shared-memory tables hold (" +
                     s(kMegaMoeMaxLocalExperts) + ", and P x E_local <= " + s(kMegaMoeMaxCounts) + ")");
  XSTAGE_REQUIRE(r.wave_lag >= 0, "MegaMoE: wave_lag is " + s(r.wave_lag) + "; it must be >= 0 (1: pipelined waves)");
  XSTAGE_REQUIRE(r.wave_experts >= 0 && r.wave_experts <= pr.E_local(),
                 "MegaMoE: wave_experts is " + s(r.wave_experts) + "; it must be 0 (automatic) to " + s(pr.E_local()) +
                     " (the local experts)");
  XSTAGE_REQUIRE(r.D_rows >= 0, "MegaMoE: the interleaved lead D_rows is " + s(r.D_rows) + "; it must be >= 0 (0: automatic)");
  XSTAGE_REQUIRE(r.capacity_slack == 0.0 || (std::isfinite(r.capacity_slack) && r.capacity_slack >= 1.0),
                 "MegaMoE: capacity_slack is " + number(r.capacity_slack) + "; it must be 0 (worst case) or >= 1");
  XSTAGE_REQUIRE(std::isfinite(r.timeout_s) && r.timeout_s > 0.0,
                 "MegaMoE: timeout_s is " + number(r.timeout_s) + "; it must be a positive number of seconds");
  if (r.automatic) return;  // the schedule rule picks only what applies
  XSTAGE_REQUIRE(r.cluster_n >= 0 && r.cluster_n <= 2,
                 "MegaMoE: cluster_n is " + s(r.cluster_n) + "; it must be 0 (automatic), 1 or 2");
  XSTAGE_REQUIRE(r.cluster_m == 1 || r.cluster_m == 2, "MegaMoE: cluster_m is " + s(r.cluster_m) + "; it must be 1 or 2");
  XSTAGE_REQUIRE(r.cluster_n != 2 || r.cluster_m != 2,
                 "MegaMoE: CTA pairs along N (cluster_n = 2) and along M (cluster_m = 2) do not combine");
  if (r.cluster_n == 2 || r.cluster_m == 2) {
    const ScheduleVariant pairs{r.schedule == MoeScheduleKind::interleaved, 0, r.cluster_n == 2 ? 2 : 1, r.cluster_m};
    std::string why;
    XSTAGE_REQUIRE(variant_applies(pr, K_SM, pairs, &why), "MegaMoE: " + why);
  }
}

}  // namespace

const NamedSchedule& named_schedule(std::string_view name) {
  std::string names;
  for (const NamedSchedule& n : kNamedSchedules) {
    if (name == n.name) return n;
    names += std::string(names.empty() ? "" : ", ") + n.name;
  }
  throw InputError("schedule is '" + std::string(name) + "'; it must be one of " + names);
}

const char* schedule_name(MoeScheduleKind kind) {
  for (const NamedSchedule& n : kNamedSchedules)
    if (!n.automatic && n.kind == kind && n.wave_lag == 0) return n.name;
  throw Error("MegaMoE: no name for a schedule kind (internal error)");
}

void MoeLayerRequest::set_schedule(std::string_view name) {
  const NamedSchedule& n = named_schedule(name);
  automatic = n.automatic;
  schedule = n.kind;
  wave_lag = n.wave_lag;
}

std::string MoeLayerPlan::name() const {
  const bool interleaved = schedule == MoeScheduleKind::interleaved;
  return std::string(automatic ? "megamoe-auto: " : "megamoe-") + to_string(schedule) +
         (interleaved ? " D=" + s(D_rows) : " W=" + s(wave_experts) + (wave_lag > 0 ? " lag=" + s(wave_lag) : "")) +
         " 128x" + s(problem.b_n) + (cluster_n > 1 ? " pairs" : "") + (cluster_m > 1 ? " m-pairs" : "");
}

std::string why_not(const MoeLayerRequest& request, const DeviceFacts& device) {
  try {
    check(request, device.known() ? device.sm_count : 0);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

MoeLayerPlan plan_layer(const MoeLayerRequest& r, const DeviceFacts& device) {
  if (!device.known()) throw Error("MegaMoE plan_layer: the device's SM count is not known (internal error)");
  check(r, device.sm_count);
  MoeLayerPlan p;
  p.problem = r.problem;
  p.automatic = r.automatic;
  p.grid = device.sm_count;
  p.timeout_s = r.timeout_s;
  if (r.automatic) {
    const ScheduleChoice choice = choose_schedule(r.problem, p.grid);
    p.schedule = choice.schedule;
    p.wave_lag = choice.wave_lag;
    p.cluster_n = choice.cluster_n;
    p.cluster_m = choice.cluster_m;
    p.reason = choice.reason;
  } else {
    p.schedule = r.schedule;
    p.wave_lag = r.schedule == MoeScheduleKind::expert_wave ? r.wave_lag : 0;
    p.cluster_m = r.cluster_m;
    p.cluster_n = r.cluster_n > 0 ? r.cluster_n : r.cluster_m == 1 ? automatic_cluster_n(r.problem, p.grid, r.schedule) : 1;
    p.reason = "as configured";
  }
  // M-pairs run 256-row scheduler rows; the schedule heuristics count them and their grid / 2 instances.
  if (p.cluster_m == 2) p.problem.b_m = 2 * r.problem.b_m;
  const bool half_l2 = p.problem.h_hidden % p.problem.b_n != 0;  // validate() allows it only as b_n = 256, h an odd multiple of 128
  p.config = megamoe_config_id(p.problem.dtype, p.problem.b_n, half_l2, p.cluster_n, p.cluster_m);
  const int instances = p.grid / p.cluster_m;
  p.D_rows = r.D_rows > 0 ? r.D_rows : static_cast<int>(interleave_lead_rows(p.problem, instances));
  p.wave_experts = r.wave_experts > 0 ? r.wave_experts : wave_size_experts(p.problem, instances);
  XSTAGE_REQUIRE(p.wave_experts >= 1 && p.wave_experts <= p.problem.E_local(),
                 "MegaMoE: wave size " + s(p.wave_experts) + " is not in [1, " + s(p.problem.E_local()) + "] local experts");
  const std::int64_t capacity = r.capacity_slack > 0 ? expected_capacity_rows(p.problem, r.capacity_slack)
                                                     : worst_case_capacity_rows(p.problem);
  p.window = plan_window(p.problem, capacity, static_cast<int>(capacity / p.problem.b_m));  // ring = plain buffer: no slot reuse
  return p;
}

}  // namespace xstage::moe
