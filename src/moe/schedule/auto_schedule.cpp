#include "moe/schedule/auto_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/error.hpp"
#include "model/moe.hpp"
#include "model/units.hpp"

namespace xstage::moe {

namespace {

// Remote bytes of one full Linear-2 CTA tile (128 rows × b_n × s_out, the (P-1)/P of rows that leave the rank).
double tile_remote_bytes(const MoeProblem& pr) {
  return static_cast<double>(MixedPairTiling::kHalfRows) * pr.b_n * pr.out_bytes * (pr.P_ranks - 1) / pr.P_ranks;
}

std::string ms(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", ns / 1e6);
  return buf;
}

std::string terms(const ScheduleCandidate& c) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "lockstep %.3f ms (dependency waits %.3f ms per CTA) x %.3g + X-Stage stall %.3f ms + re-reads %.3f ms",
                c.makespan_ns / 1e6, c.dependency_wait_ns / 1e6, c.factor, c.stall_ns / 1e6, c.reread_ns / 1e6);
  return buf;
}

}  // namespace

double hbm_weight_bytes(const MoeProblem& pr, const std::vector<int>& expert_rows, int K_SM, const ScheduleVariant& v,
                        double l2_bytes) {
  validate(pr);
  XSTAGE_REQUIRE(static_cast<int>(expert_rows.size()) == pr.E_local(), "pass model: one row count per local expert");
  XSTAGE_REQUIRE(K_SM >= 1 && l2_bytes > 0.0, "pass model: K_SM and the L2 size must be positive");
  // Per expert: W1 (2·h_inter × h) and W2 (h × h_inter) weight bytes; per row P1 and P2 tiles.
  const double s = pr.elem_bytes();
  const double W1 = 2.0 * pr.h_inter * pr.h_hidden * s, W2 = static_cast<double>(pr.h_hidden) * pr.h_inter * s;
  const double P1 = pr.P1_l1_n_blocks(), P2 = pr.P2_l2_n_blocks();
  // Rows (128-row blocks) that use one weight tile at about the same time, and the weight bytes that stream
  // between two uses of it by successive passes. Expert-wave: Linear-1 in groups of 16 rows n-block by
  // n-block (ExpertWaveSchedule::kL1RowGroup), Linear-2 row-major over all K_SM CTAs, one stage's weights at a
  // time (pipelined waves: both stages' streams at once). Interleaved: both streams row-major, shared by the
  // CTAs in proportion to the work (Linear-1 is 2/3 of the FLOPs: 2·h_inter·h against h·h_inter per row).
  // M-pairs: one pass (measured: interleaved M-pairs run 0.74-0.89x the time of single-CTA interleaving on the
  // Mixtral-like experts, where this model predicts the single CTAs' re-reads; docs/MOE.md).
  const bool one_pass = v.cluster_m == 2;
  const double l1_share = 2.0 / 3.0;
  double rho1 = ExpertWaveSchedule::kL1RowGroup, rho2 = K_SM / P2, live1 = W1, live2 = W2;
  if (v.interleaved) {
    rho1 = K_SM * l1_share / P1;
    rho2 = K_SM * (1.0 - l1_share) / P2;
    live1 = live2 = W1 + W2;
  } else if (v.wave_lag > 0) {
    live1 = live2 = W1 + W2;
  }
  double bytes = 0.0;
  for (int rows : expert_rows) {
    const double m = std::ceil(rows / static_cast<double>(MixedPairTiling::kHalfRows));
    if (m <= 0.0) continue;
    // A tile is read once while the bytes streaming between its uses fit in L2, else once per pass.
    const double passes1 = !one_pass && live1 > l2_bytes ? std::ceil(m / std::max(1.0, rho1)) : 1.0;
    const double passes2 = !one_pass && live2 > l2_bytes ? std::ceil(m / std::max(1.0, rho2)) : 1.0;
    bytes += W1 * passes1 + W2 * passes2;
  }
  return bytes;
}

model::PlatformPoint h200_nvlink4_point(const MoeProblem& pr) {
  validate(pr);
  model::PlatformPoint p = kH200NvLink4Point;
  const double B = tile_remote_bytes(pr);
  if (B > 0.0) p.T_iss0_ns *= B / kH200NvLink4PointBytes;
  return p;
}

ScheduleChoice choose_schedule(const MoeProblem& problem, int K_SM) {
  return choose_schedule(problem, K_SM, h200_nvlink4_point(problem));
}

ScheduleChoice choose_schedule(const MoeProblem& problem, int K_SM, const model::PlatformPoint& platform,
                               const ScheduleRule& rule) {
  validate(problem);
  return choose_schedule(problem, balanced_expert_rows(problem), K_SM, platform, rule);
}

ScheduleChoice choose_schedule(const MoeProblem& pr, const std::vector<int>& rows, int K_SM,
                               const model::PlatformPoint& platform, const ScheduleRule& rule) {
  validate(pr);
  XSTAGE_REQUIRE(K_SM >= 1, "choose_schedule: K_SM must be positive (got " + std::to_string(K_SM) + ")");
  XSTAGE_REQUIRE(static_cast<int>(rows.size()) == pr.E_local(), "choose_schedule: one row count per local expert");
  model::validate_platform_point(platform, "choose_schedule platform point");
  const bool fp8 = pr.dtype == DType::fp8_e4m3;
  const model::MoeMainloopTimes t = model::moe_mainloop_times(MixedPairTiling::kHalfRows, pr.b_n, pr.h_hidden, pr.h_inter,
                                                              fp8 ? rule.tflops_fp8 : rule.tflops_bf16, K_SM);
  ScheduleAuditConfig cfg;
  cfg.T_L1_ns = t.T_L1_ns;
  cfg.T_L2_ns = t.T_L2_ns;
  cfg.platform = platform;
  cfg.latency_ns = rule.latency_ns;
  cfg.ticks_per_tile = rule.ticks_per_tile;
  cfg.seed = rule.seed;
  const int fewest_rows = rows.empty() ? 0 : *std::min_element(rows.begin(), rows.end());

  ScheduleChoice out;
  out.K_SM = K_SM;
  out.rows_per_expert = fewest_rows;
  for (const ScheduleVariant& v : kernel_variants(pr, K_SM, true)) {
    ScheduleCandidate c;
    c.variant = v;
    c.applies = true;
    if (v.cluster_m == 2 && fewest_rows < rule.m_pairs_min_rows) {
      c.applies = false;
      c.why_not = "M-pairs need every expert to fill a pair's rows at the balanced load (" + std::to_string(fewest_rows) +
                  " < " + std::to_string(rule.m_pairs_min_rows) + " rows): skewed routing would leave half-empty blocks";
      out.candidates.push_back(c);
      continue;
    }
    // Δt from the aligned lockstep (the worst case for the combine), the makespan from the jittered one.
    cfg.time_jitter = 0.0;
    cfg.simulate_combine = true;
    const ScheduleAudit aligned = audit_schedule(pr, rows, K_SM, v, cfg);
    c.stall_ns = aligned.combine.stall_ns_per_cta;
    c.K_act_mean = aligned.combine.K_act.mean;
    cfg.time_jitter = rule.time_jitter;
    cfg.simulate_combine = false;
    const ScheduleAudit jittered = audit_schedule(pr, rows, K_SM, v, cfg);
    c.makespan_ns = jittered.makespan_ns;
    c.dependency_wait_ns = jittered.wait_ns_per_cta;
    c.factor = 1.0;
    if (v.interleaved) c.factor *= fp8 ? rule.factor_interleaved_fp8 : rule.factor_interleaved_bf16;
    else if (v.wave_lag > 0) c.factor *= rule.factor_pipelined;
    if (v.cluster_m == 2) c.factor *= rule.factor_m_pairs * (1.0 + rule.skew_hedge_m_pairs);
    if (!v.interleaved) c.factor *= 1.0 + rule.skew_hedge_waves;
    c.hbm_weight_bytes = hbm_weight_bytes(pr, rows, K_SM, v, rule.l2_bytes);
    out.candidates.push_back(c);
  }
  double fewest_bytes = -1.0;
  for (const ScheduleCandidate& c : out.candidates)
    if (c.applies && (fewest_bytes < 0.0 || c.hbm_weight_bytes < fewest_bytes)) fewest_bytes = c.hbm_weight_bytes;
  const ScheduleCandidate* best = nullptr;
  const ScheduleCandidate* second = nullptr;
  for (ScheduleCandidate& c : out.candidates) {
    if (!c.applies) continue;
    c.reread_ns = rule.reread_cost * (c.hbm_weight_bytes - fewest_bytes) / rule.hbm_bytes_per_ns;
    c.predicted_ns = c.makespan_ns * c.factor + c.stall_ns + c.reread_ns;
  }
  for (const ScheduleCandidate& c : out.candidates) {
    if (!c.applies) continue;
    if (!best || c.predicted_ns < best->predicted_ns) second = best, best = &c;
    else if (!second || c.predicted_ns < second->predicted_ns) second = &c;
  }
  if (!best) throw Error("choose_schedule: no schedule applies (internal error: expert-wave always does)");
  out.chosen = *best;
  if (second) out.runner_up = *second;
  out.schedule = best->variant.interleaved ? MoeScheduleKind::interleaved : MoeScheduleKind::expert_wave;
  out.wave_lag = best->variant.interleaved ? 0 : best->variant.wave_lag;
  out.cluster_n = best->variant.cluster_n;
  out.cluster_m = best->variant.cluster_m;
  out.reason = describe(best->variant) + ": predicted " + ms(best->predicted_ns) + " = " + terms(*best);
  if (second)
    out.reason += "; next best " + describe(second->variant) + " " + ms(second->predicted_ns) + " = " + terms(*second);
  out.reason += " (balanced load: " + std::to_string(fewest_rows) + " rows per expert)";
  return out;
}

}  // namespace xstage::moe
