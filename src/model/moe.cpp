#include "model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.hpp"
#include "model/units.hpp"

namespace xstage::model {

// Eq. 12–14
InterleaveTest interleave_test(const PlatformPoint& p, double V_bytes, double T_L1_ns, double T_L2_ns,
                               double n1, double n2) {
  validate_platform_point(p);
  require_positive(V_bytes, "burst volume V");
  require_positive(T_L1_ns, "Linear-1 mainloop time T_L1");
  require_positive(T_L2_ns, "Linear-2 mainloop time T_L2");
  require_positive(n1, "L1 tiles per cycle n1");
  require_positive(n2, "L2 tiles per cycle n2");
  InterleaveTest t;
  t.G_wave_ns = T_L2_ns;
  t.G_int_ns = T_L2_ns + (n1 / n2) * T_L1_ns;                                      // Eq. 12
  t.dT_iss_wave_ns = issue_overhead_ns(p, V_bytes, t.G_wave_ns);                   // Eq. 9
  t.dT_iss_int_ns = positive_part(t.dT_iss_wave_ns - (n1 / n2) * T_L1_ns);         // Eq. 13
  t.injection_rate_int_bytes_per_ns = n2 * V_bytes / (n2 * (p.T_iss0_ns + T_L2_ns) + n1 * T_L1_ns);
  t.sufficient = t.injection_rate_int_bytes_per_ns <= p.R_bytes_per_ns;            // Eq. 14
  return t;
}

long anti_starvation_lead_rows(int b_n, int K_SM, int h_inter) {
  require_positive(b_n, "tile width b_n");
  require_positive(K_SM, "SM count K_SM");
  require_positive(h_inter, "expert intermediate size h_inter");
  const long num = static_cast<long>(b_n) * K_SM, den = 2L * h_inter;
  return (num + den - 1) / den;  // ceil, in integers
}

double remote_store_span_ns(const PlatformPoint& p, double V_bytes, double G_ns) {
  return p.T_iss0_ns + issue_overhead_ns(p, V_bytes, G_ns);
}

// Eq. 15
double critical_path_stall_ns(double T_RS_ns, double T_cover_ns) { return positive_part(T_RS_ns - T_cover_ns); }

MoeMainloopTimes moe_mainloop_times(int b_m, int b_n, int h, int h_inter, double tflops, int K_SM) {
  require_positive(b_m, "tile rows b_m");
  require_positive(b_n, "tile width b_n");
  require_positive(h, "hidden size h");
  require_positive(h_inter, "expert intermediate size h_inter");
  const double tile = 2.0 * b_m * b_n;
  return {per_sm_time_ns(tile * h, tflops, K_SM), per_sm_time_ns(tile * h_inter, tflops, K_SM)};
}

TileMix natural_tile_mix(int h, int h_inter) {
  require_positive(h, "hidden size h");
  require_positive(h_inter, "expert intermediate size h_inter");
  // L1 tiles span 2·h_inter columns and L2 tiles h columns per row; reduce the ratio to lowest terms.
  const long g = std::gcd(2L * h_inter, static_cast<long>(h));
  return {2.0 * h_inter / g, static_cast<double>(h) / g};
}

namespace {

void validate_kernel(const MoeKernel& k) {
  require_positive(k.b_m, "tile rows b_m");
  require_positive(k.b_n, "tile width b_n");
  require_positive(k.out_bytes, "output element size s_out");
  require_positive(k.K_act, "aligned producers K_act");
  require_positive(k.T_L1_ns, "Linear-1 mainloop time T_L1");
  require_positive(k.T_L2_ns, "Linear-2 mainloop time T_L2");
  require_positive(k.mix.n1, "L1 tiles per cycle n1");
  require_positive(k.mix.n2, "L2 tiles per cycle n2");
  require_positive(k.K_SM, "SM count K_SM");
  if (k.K_act > k.K_SM)
    throw InputError("K_act (" + std::to_string(k.K_act) + ") cannot exceed the SMs running the kernel (" +
                     std::to_string(k.K_SM) + ")");
}

std::string moe_action(const MoeAudit& a) {
  const std::string lead = a.D_knee_rows ? " with a lead D >= D_knee = " + std::to_string(*a.D_knee_rows) +
                                               " rows (more only costs L2-cache locality)"
                                         : " with a lead D at or above D_knee (give --h-inter to compute it)";
  switch (a.verdict) {
    case Verdict::piggyback:
      return "keep the expert-wave schedule: one L2 mainloop (" + format_time_ns(a.interleave.G_wave_ns) +
             ") already covers the drain (G* = " + format_time_ns(a.wave.G_star_ns) +
             "); interleaving would only cost expert-weight locality.";
    case Verdict::reshape:
      return "reshape: interleave ready L1 tiles between L2 tiles" + lead + ". That widens the gap from " +
             format_time_ns(a.interleave.G_wave_ns) + " to " + format_time_ns(a.interleave.G_int_ns) +
             " >= G* = " + format_time_ns(a.wave.G_star_ns) + ", cutting the issue overhead from " +
             format_time_ns(a.interleave.dT_iss_wave_ns) + " to 0 and the critical-path stall per L2 tile from " +
             format_time_ns(a.stall_wave_ns) + " to " + format_time_ns(a.stall_int_ns) + ".";
    case Verdict::shrink_burst: {
      if (!a.interleaved.capacity_bound_holds)
        return "shrink the burst: one aligned combine burst of " + format_bytes(a.V_bytes) +
               " overflows Q on its own (q_peak = " + format_bytes(a.wave.q_peak_bytes) + " > Q = " +
               format_bytes(a.wave.platform.Q_bytes) + "); align at most " + format_bytes(a.wave.V_max_capacity_bytes) +
               " (fewer producers per boundary or smaller tiles), then re-check the rate bound.";
      return "interleave" + lead + " and also shrink the aligned burst: interleaving alone leaves " +
             format_time_ns(a.interleave.dT_iss_int_ns) + " of issue overhead per burst (G_int = " +
             format_time_ns(a.interleave.G_int_ns) + " < G* = " + format_time_ns(a.wave.G_star_ns) +
             "); at G_int the drain keeps up with at most " + format_bytes(a.interleaved.V_max_rate_bytes) +
             " per aligned burst (now " + format_bytes(a.V_bytes) + ").";
    }
  }
  return {};
}

}  // namespace

MoeAudit audit_moe(const PlatformPoint& p, const MoeKernel& k) {
  validate_platform_point(p);
  validate_kernel(k);
  MoeAudit a;
  a.kernel = k;
  a.B_bytes = static_cast<double>(k.b_m) * k.b_n * k.out_bytes;
  a.V_bytes = a.B_bytes * k.K_act;
  a.interleave = interleave_test(p, a.V_bytes, k.T_L1_ns, k.T_L2_ns, k.mix.n1, k.mix.n2);
  a.wave = design_test(p, a.V_bytes, a.interleave.G_wave_ns);
  a.interleaved = design_test(p, a.V_bytes, a.interleave.G_int_ns);

  // Eq. 15. Wave: every L2 tile is followed by an L2 mainloop.
  a.T_RS_wave_ns = p.T_iss0_ns + a.interleave.dT_iss_wave_ns;
  a.stall_wave_ns = critical_path_stall_ns(a.T_RS_wave_ns, k.T_L2_ns);
  // Interleaved: min(n1, n2) of the n2 L2 tiles are followed by an L1 mainloop, the rest by an L2 one.
  a.T_RS_int_ns = p.T_iss0_ns + a.interleave.dT_iss_int_ns;
  const double followed_by_l1 = std::min(k.mix.n1, k.mix.n2);
  a.stall_int_ns = (followed_by_l1 * critical_path_stall_ns(a.T_RS_int_ns, k.T_L1_ns) +
                    (k.mix.n2 - followed_by_l1) * critical_path_stall_ns(a.T_RS_int_ns, k.T_L2_ns)) /
                   k.mix.n2;
  if (k.h_inter) a.D_knee_rows = anti_starvation_lead_rows(k.b_n, k.K_SM, *k.h_inter);

  if (!a.wave.capacity_bound_holds || !a.interleave.sufficient)
    a.verdict = Verdict::shrink_burst;
  else if (!a.wave.rate_bound_holds)
    a.verdict = Verdict::reshape;
  else
    a.verdict = Verdict::piggyback;
  a.action = moe_action(a);
  return a;
}

}  // namespace xstage::model
