#include "model/attention.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "model/units.hpp"

namespace xstage::model {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

void validate_kernel(const AttentionKernel& k) {
  require_positive(k.b_m, "output tile rows b_m");
  require_positive(k.b_n, "KV tile rows b_n");
  require_positive(k.head_dim, "head dimension d");
  require_positive(k.out_bytes, "output element size s_out");
  require_positive(k.K, "producers K");
  require_positive(k.sigma_ns, "time per KV tile sigma");
  require_positive(static_cast<double>(k.heads), "heads per rank");
  require_positive(static_cast<double>(k.batch), "batch");
  if (!std::isfinite(k.G_QK_ns) || k.G_QK_ns < 0.0) throw InputError("the QK^T cover window G_QK must not be negative");
  if (!std::isfinite(k.T_lat_ns) || k.T_lat_ns < 0.0) throw InputError("the completion latency T_lat must not be negative");
  if (!(k.remote_fraction >= 0.0 && k.remote_fraction <= 1.0))
    throw InputError("the remote fraction of the output must be in [0, 1] (got " + std::to_string(k.remote_fraction) + ")");
}

// A point's shape: its Q-loop gap and how many tiles, in how many waves of the K producers.
AttentionPoint point_geometry(const AttentionKernel& k, std::int64_t M) {
  if (M <= 0) throw InputError("sequence length M must be positive (got " + std::to_string(M) + ")");
  AttentionPoint pt;
  pt.M = M;
  pt.G_Qloop_ns = qloop_gap_lower_bound_ns(k.sigma_ns, M, k.b_n);
  pt.tiles = ceil_div(M, k.b_m) * k.heads * k.batch;
  pt.N_t = ceil_div(pt.tiles, k.K);
  return pt;
}

AttentionPoint audit_point(const PlatformPoint& p, const AttentionKernel& k, double V_bytes, std::int64_t M) {
  AttentionPoint pt = point_geometry(k, M);
  pt.dt_ns = issue_overhead_ns(p, V_bytes, pt.G_Qloop_ns);                        // Eq. 18
  pt.dt_critical_ns = positive_part(pt.dt_ns - k.G_QK_ns);
  pt.E_drain_ns = static_cast<double>(pt.N_t) * pt.dt_critical_ns;
  pt.dt_cc_ns = positive_part(V_bytes / p.R_bytes_per_ns + k.T_lat_ns - k.G_QK_ns);  // Eq. 16
  pt.E_cc_ns = static_cast<double>(pt.N_t) * pt.dt_cc_ns;                          // Eq. 17
  pt.E_tail_ns = V_bytes / p.R_bytes_per_ns + k.T_lat_ns;
  pt.E_res_ns = pt.E_drain_ns + pt.E_tail_ns;
  pt.test = design_test(p, V_bytes, pt.G_Qloop_ns);
  return pt;
}

std::string attention_action(const AttentionAudit& a) {
  const AttentionPoint* worst = &a.points.front();
  for (const AttentionPoint& pt : a.points)
    if (pt.M < worst->M) worst = &pt;
  const std::string mub = "M_ub* = " + std::to_string(a.M_ub) + " tokens";
  switch (a.verdict) {
    case Verdict::piggyback:
      return "piggyback: fuse the all-to-all into the epilogue; the owning role issues each output tile's remote "
             "stores and starts its next tile. Every requested M is >= " + mub +
             ", so the Q-loop (>= " + format_time_ns(worst->G_Qloop_ns) + ") drains each burst (G* = " +
             format_time_ns(a.G_star_ns) + "); no communication warps or SMs are needed.";
    case Verdict::reshape:
      return "piggyback only for M >= " + mub + ": at M = " + std::to_string(worst->M) + " the Q-loop (" +
             format_time_ns(worst->G_Qloop_ns) + ") is shorter than G* = " + format_time_ns(a.G_star_ns) +
             " and each aligned burst pays " + format_time_ns(worst->dt_ns) + " of issue back-pressure (" +
             format_time_ns(worst->dt_critical_ns) + " on the critical path after the QK^T cover). Below M_ub*, "
             "stagger the CTAs' tile boundaries, use fewer concurrent producers, or keep a separate all-to-all.";
    case Verdict::shrink_burst:
      return "shrink the burst: " + std::to_string(a.kernel.K) + " aligned output tiles (" + format_bytes(a.V_bytes) +
             ") overflow Q on their own (q_peak = " + format_bytes(a.q_peak_bytes) + " > Q = " +
             format_bytes(a.points.front().test.platform.Q_bytes) + "). Use smaller output tiles (b_m), fewer "
             "concurrent producers, or staggered tile boundaries so at most " +
             format_bytes(a.points.front().test.V_max_capacity_bytes) + " align.";
  }
  return {};
}

}  // namespace

double attention_tile_bytes(int b_m, int head_dim, int out_bytes) {
  return static_cast<double>(b_m) * head_dim * out_bytes;
}

double qloop_gap_lower_bound_ns(double sigma_ns, std::int64_t M, int b_n) {
  return sigma_ns * static_cast<double>(ceil_div(M, b_n));
}

std::int64_t sufficient_seq_len(double G_star_ns, double sigma_ns, int b_n) {
  require_positive(sigma_ns, "time per KV tile sigma");
  const double M_ub = static_cast<double>(b_n) * std::ceil(G_star_ns / sigma_ns);
  // Computed in double so that it cannot wrap; a length past 2^53 tokens is no sequence (and no longer exact).
  if (!(M_ub <= 9007199254740992.0))
    throw InputError("the sufficient length M_ub* = b_n*ceil(G*/sigma) = " + std::to_string(M_ub) + " tokens (G* = " +
                     format_time_ns(G_star_ns) + ", sigma = " + format_time_ns(sigma_ns) +
                     ") is beyond any sequence: check the units of sigma and the platform's R");
  return static_cast<std::int64_t>(M_ub);
}

double sigma_from_throughput_ns(int b_m, int b_n, int head_dim, double tflops, int K_SM) {
  require_positive(b_m, "output tile rows b_m");
  require_positive(b_n, "KV tile rows b_n");
  require_positive(head_dim, "head dimension d");
  return per_sm_time_ns(4.0 * b_m * b_n * head_dim, tflops, K_SM);
}

std::vector<PushPoint> audit_push(const PlatformPoint& p, const AttentionAudit& a, double R_push_bytes_per_ns, int in_bytes,
                                  int ranks) {
  validate_platform_point(p);
  if (!(R_push_bytes_per_ns > 0.0)) throw InputError("the pusher's rate must be positive");
  if (in_bytes <= 0) throw InputError("bytes per Q, K, V element must be positive");
  if (ranks < 2) throw InputError("fused_both pushes to other ranks: give P >= 2 Ulysses ranks");
  const AttentionKernel& k = a.kernel;
  const double P = ranks, head_bytes = 3.0 * in_bytes * static_cast<double>(k.head_dim);  // one row of Q, K, V of one head
  std::vector<PushPoint> out;
  for (const AttentionPoint& pt : a.points) {
    PushPoint q;
    q.M = pt.M;
    const std::int64_t m_blocks = ceil_div(pt.M, k.b_m), heads = k.heads * k.batch;
    q.first_wave_heads = std::min(heads, ceil_div(k.K, m_blocks));
    const double per_head = head_bytes * static_cast<double>(pt.M);  // one head's rows from one rank to all ranks
    q.head_start_bytes = static_cast<double>(q.first_wave_heads) * per_head * (P - 1.0) / P;
    q.head_start_ns = q.head_start_bytes / p.R_bytes_per_ns;
    q.wave_ns = pt.G_Qloop_ns;
    // Each receiver reads its own rows of the head in place: the pusher moves the other P - 1 ranks' part.
    q.wave_bytes = std::min(static_cast<double>(heads), static_cast<double>(k.K) / static_cast<double>(m_blocks)) * per_head * (P - 1.0) / P;
    q.stall_per_wave_ns = std::max(0.0, q.wave_bytes / R_push_bytes_per_ns - q.wave_ns);
    q.E_push_ns = q.head_start_ns + static_cast<double>(std::max<std::int64_t>(pt.N_t - 1, 0)) * q.stall_per_wave_ns;
    q.pre_all_to_all_ns = static_cast<double>(heads) * per_head * (P - 1.0) / P / p.R_bytes_per_ns;
    q.hidden_fraction = 1.0 - q.E_push_ns / q.pre_all_to_all_ns;
    out.push_back(q);
  }
  return out;
}

AttentionAudit audit_attention(const PlatformPoint& p, const AttentionKernel& k,
                               const std::vector<std::int64_t>& seq_lens) {
  validate_platform_point(p);
  validate_kernel(k);
  if (seq_lens.empty()) throw InputError("give at least one sequence length M");
  AttentionAudit a;
  a.kernel = k;
  a.B_bytes = attention_tile_bytes(k.b_m, k.head_dim, k.out_bytes);
  a.V_bytes = a.B_bytes * k.K * k.remote_fraction;
  if (a.V_bytes <= 0.0) {  // one rank: nothing leaves it, no X-Stage; only the completion latency remains
    for (std::int64_t M : seq_lens) {
      AttentionPoint pt = point_geometry(k, M);
      pt.E_tail_ns = pt.E_res_ns = pt.E_cc_ns = k.T_lat_ns;
      pt.test.verdict = Verdict::piggyback;
      a.points.push_back(pt);
    }
    a.capacity_bound_holds = true;
    a.verdict = Verdict::piggyback;
    a.action = "nothing leaves the rank (one rank): no remote stores to overlap";
    return a;
  }
  a.G_star_ns = recovery_gap_ns(p, a.V_bytes);
  a.q_peak_bytes = peak_outstanding_bytes(p, a.V_bytes);
  a.capacity_bound_holds = a.q_peak_bytes <= p.Q_bytes;
  a.M_ub = sufficient_seq_len(a.G_star_ns, k.sigma_ns, k.b_n);
  for (std::int64_t M : seq_lens) a.points.push_back(audit_point(p, k, a.V_bytes, M));

  // The worst verdict over the requested lengths: shrink_burst > reshape > piggyback.
  a.verdict = Verdict::piggyback;
  for (const AttentionPoint& pt : a.points) {
    if (pt.test.verdict == Verdict::shrink_burst) a.verdict = Verdict::shrink_burst;
    else if (pt.test.verdict == Verdict::reshape && a.verdict == Verdict::piggyback) a.verdict = Verdict::reshape;
  }
  a.action = attention_action(a);
  return a;
}

}  // namespace xstage::model
