#include "model/burst_gap.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "model/units.hpp"

namespace xstage::model {

namespace {


void validate_pattern(double V_bytes, double G_ns) {
  if (!std::isfinite(V_bytes) || V_bytes <= 0.0)
    throw InputError("burst volume V must be a positive number of bytes (got " + std::to_string(V_bytes) + ")");
  if (!std::isfinite(G_ns) || G_ns < 0.0)
    throw InputError("gap G must be a non-negative time (got " + std::to_string(G_ns) + " ns)");
}

}  // namespace

void validate_platform_point(const PlatformPoint& p, const std::string& what) {
  require_positive(p.T_iss0_ns, what + ": T_iss0_ns");
  require_positive(p.R_bytes_per_ns, what + ": R_bytes_per_ns");
  require_positive(p.Q_bytes, what + ": Q_bytes");
}

// Eq. 3
double issue_time_ns(const PlatformPoint& p, double V_bytes, double G_ns) {
  return std::max(p.T_iss0_ns, V_bytes / p.R_bytes_per_ns - G_ns);
}

// Eq. 4
double issue_overhead_ns(const PlatformPoint& p, double V_bytes, double G_ns) {
  return positive_part(V_bytes / p.R_bytes_per_ns - G_ns - p.T_iss0_ns);
}

// Eq. 1–3: T_period = T_iss + G, which is the max law.
double period_ns(const PlatformPoint& p, double V_bytes, double G_ns) {
  return std::max(p.T_iss0_ns + G_ns, V_bytes / p.R_bytes_per_ns);
}

double period_completion_coupled_ns(const PlatformPoint& p, double V_bytes, double G_ns) {
  return G_ns + V_bytes / p.R_bytes_per_ns;
}

// Eq. 4 (recovery threshold)
double recovery_gap_ns(const PlatformPoint& p, double V_bytes) {
  return positive_part(V_bytes / p.R_bytes_per_ns - p.T_iss0_ns);
}

// Eq. 5
double peak_outstanding_bytes(const PlatformPoint& p, double V_bytes) {
  return positive_part(V_bytes - p.R_bytes_per_ns * p.T_iss0_ns);
}

// Eq. 6
double isolated_issue_time_ns(const PlatformPoint& p, double V_bytes) {
  return std::max(p.T_iss0_ns, (V_bytes - p.Q_bytes) / p.R_bytes_per_ns);
}

double aligned_issue_time_ns(const PlatformPoint& p, double V_bytes, double G_ns) {
  return std::max(issue_time_ns(p, V_bytes, G_ns), isolated_issue_time_ns(p, V_bytes));
}

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::piggyback: return "piggyback";
    case Verdict::reshape: return "reshape";
    case Verdict::shrink_burst: return "shrink the burst";
  }
  return "?";
}

const char* verdict_id(Verdict verdict) {
  switch (verdict) {
    case Verdict::piggyback: return "piggyback";
    case Verdict::reshape: return "reshape";
    case Verdict::shrink_burst: return "shrink_burst";
  }
  return "?";
}

namespace {

// The words behind each verdict (§4.1). Numbers are quoted so the user can act without re-deriving them.
std::string recommend(const DesignTest& t) {
  const PlatformPoint& p = t.platform;
  switch (t.verdict) {
    case Verdict::piggyback:
      return "piggyback: issue the remote stores from the role that owns the output and go straight back "
             "to compute; the gap (" + format_time_ns(t.G_ns) + ") covers the drain (G* = " +
             format_time_ns(t.G_star_ns) + "), so no dedicated communication warps or SMs are needed.";
    case Verdict::reshape:
      return "reshape the injection: put at least " + format_time_ns(-t.gap_margin_ns) +
             " more useful work with no remote stores between consecutive bursts (G >= G* = " +
             format_time_ns(t.G_star_ns) + "), e.g. interleave independent tiles, or shrink the aligned "
             "burst to at most " + format_bytes(t.V_max_rate_bytes) + " (R*(T_iss0+G)). Until then each "
             "burst pays " + format_time_ns(t.dT_iss_ns) + " of issue back-pressure.";
    case Verdict::shrink_burst: {
      std::string s = "shrink the aligned burst to at most " + format_bytes(t.V_max_capacity_bytes) +
                      " (Q + R*T_iss0): fewer producers aligned on one boundary (stagger their phases), "
                      "or fewer bytes per producer. No gap helps: a single burst from an empty X-Stage "
                      "overflows Q by " + format_bytes(-t.capacity_margin_bytes) + " and issues in T_iso = " +
                      format_time_ns(t.T_iso_ns) + " instead of " + format_time_ns(p.T_iss0_ns) + ".";
      if (!t.rate_bound_holds)
        s += " The rate bound is broken too: after shrinking, keep G >= V/R - T_iss0.";
      return s;
    }
  }
  return {};
}

}  // namespace

// Eq. 10 and §4.1.
DesignTest design_test(const PlatformPoint& p, double V_bytes, double G_ns) {
  validate_platform_point(p);
  validate_pattern(V_bytes, G_ns);
  DesignTest t;
  t.V_bytes = V_bytes;
  t.G_ns = G_ns;
  t.platform = p;

  t.injection_rate_bytes_per_ns = V_bytes / (p.T_iss0_ns + G_ns);
  t.rate_bound_holds = t.injection_rate_bytes_per_ns <= p.R_bytes_per_ns;
  t.rate_margin = 1.0 - t.injection_rate_bytes_per_ns / p.R_bytes_per_ns;
  t.G_star_ns = recovery_gap_ns(p, V_bytes);
  t.gap_margin_ns = G_ns - t.G_star_ns;

  t.q_peak_bytes = peak_outstanding_bytes(p, V_bytes);
  t.capacity_bound_holds = t.q_peak_bytes <= p.Q_bytes;
  t.capacity_margin_bytes = p.Q_bytes - t.q_peak_bytes;
  t.V_max_capacity_bytes = p.Q_bytes + p.R_bytes_per_ns * p.T_iss0_ns;
  t.V_max_rate_bytes = p.R_bytes_per_ns * (p.T_iss0_ns + G_ns);

  t.T_iss_ns = aligned_issue_time_ns(p, V_bytes, G_ns);
  t.dT_iss_ns = t.T_iss_ns - p.T_iss0_ns;
  t.T_period_ns = t.T_iss_ns + G_ns;
  t.T_period_cc_ns = period_completion_coupled_ns(p, V_bytes, G_ns);
  t.T_iso_ns = isolated_issue_time_ns(p, V_bytes);

  // A capacity violation is checked first: no amount of gap fixes a burst that overflows on its own.
  if (!t.capacity_bound_holds)
    t.verdict = Verdict::shrink_burst;
  else if (!t.rate_bound_holds)
    t.verdict = Verdict::reshape;
  else
    t.verdict = Verdict::piggyback;
  t.action = recommend(t);
  return t;
}

}  // namespace xstage::model
