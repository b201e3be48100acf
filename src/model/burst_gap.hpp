// The X-Stage Burst–Gap model (paper §3.2–3.5, §4.1): closed forms for one periodic burst pattern.
//
// A pattern is K producers that each store B bytes (aggregate burst V = K·B) and then compute for a gap
// G with no remote stores. The platform at that operating point is M_X = (T_iss0, R, Q), see
// PlatformPoint. Every function here is pure arithmetic on those numbers; the platform file and its
// interpolation live in platform.hpp, the kernel audits in moe.hpp / attention.hpp.
//
// Units are in the names: _ns (nanoseconds), _bytes, _bytes_per_ns (1 byte/ns == 1 GB/s).
//
// Equation numbers follow the paper summary (seed/x-stage-paper-summary.zh.txt). The summary cites
// Eq. 4, 6, 9, 10, 12–15, 17, 18 by number; Eq. 1–3 and 5 are numbered here by their order in §3.2–3.5.
#pragma once

#include <string>

namespace xstage::model {

// [x]+ = max(x, 0).
constexpr double positive_part(double x) { return x > 0.0 ? x : 0.0; }

// M_X evaluated at one producer configuration (K, V): what the closed forms need.
struct PlatformPoint {
  double T_iss0_ns = 0.0;       // no-back-pressure issue time of one recovered burst
  double R_bytes_per_ns = 0.0;  // effective aggregate drain rate
  double Q_bytes = 0.0;         // effective outstanding capacity Q(K)
};

// Sender-visible issue time of one burst in steady state (Eq. 3):
//   T_iss = max(T_iss0, V/R − G).
double issue_time_ns(const PlatformPoint& p, double V_bytes, double G_ns);

// Back-pressure overhead (Eq. 4): ΔT_iss = [V/R − G − T_iss0]+.
double issue_overhead_ns(const PlatformPoint& p, double V_bytes, double G_ns);

// Steady start-to-start period, the X-Stage "max law" (Eq. 1 + 2 + 3):
//   T_period = T_iss + G = max(T_iss0 + G, V/R).
double period_ns(const PlatformPoint& p, double V_bytes, double G_ns);

// The completion-coupled counterfactual: if issue had to wait for remote completion, the gap would add
// to the drain instead of overlapping it: T_period^cc = G + V/R (paper §3.4, §4.2).
double period_completion_coupled_ns(const PlatformPoint& p, double V_bytes, double G_ns);

// The least gap that fully recovers (Eq. 4): G* = [V/R − T_iss0]+.
double recovery_gap_ns(const PlatformPoint& p, double V_bytes);

// Outstanding volume at the end of an unconstrained burst from an empty X-Stage (Eq. 5):
//   q_peak = [V − R·T_iss0]+.
double peak_outstanding_bytes(const PlatformPoint& p, double V_bytes);

// Issue time of an isolated, aligned burst into an empty X-Stage (Eq. 6):
//   T_iso = max(T_iss0, (V − Q)/R).
double isolated_issue_time_ns(const PlatformPoint& p, double V_bytes);

// Aligned steady-state issue time with the capacity bound included: max(Eq. 3, Eq. 6). Eq. 3 alone
// assumes q_peak ≤ Q; when a single burst overflows Q, even a fully recovered burst takes T_iso. For
// G < Q/R the drain branch of Eq. 3 dominates anyway, so this is exact for the fluid model
// (see docs/MODEL.md and the simulator).
double aligned_issue_time_ns(const PlatformPoint& p, double V_bytes, double G_ns);

// ---------------------------------------------------------------------------------------------
// The two-bound design test (Eq. 10) and what to do about it (§4.1).
// ---------------------------------------------------------------------------------------------

enum class Verdict {
  piggyback,     // both bounds hold: issue and return to useful work; the X-Stage drains in the gap
  reshape,       // rate bound broken: put useful work between bursts (or shrink the burst)
  shrink_burst,  // capacity bound broken: one aligned burst overflows Q whatever the gap
};
const char* to_string(Verdict verdict);  // words: "piggyback", "reshape", "shrink the burst"
const char* verdict_id(Verdict verdict);  // identifiers for JSON: "piggyback", "reshape", "shrink_burst"

struct DesignTest {
  // The pattern and the platform it was judged against.
  double V_bytes = 0.0;
  double G_ns = 0.0;
  PlatformPoint platform;

  // Rate bound: V/(T_iss0 + G) ≤ R (long-run injection no faster than the drain).
  double injection_rate_bytes_per_ns = 0.0;
  bool rate_bound_holds = false;
  double rate_margin = 0.0;   // 1 − injection/R: > 0 headroom, < 0 fraction over the drain
  double G_star_ns = 0.0;     // G*, the least gap that satisfies the rate bound
  double gap_margin_ns = 0.0; // G − G*: < 0 is how much useful work is missing between bursts

  // Capacity bound: [V − R·T_iss0]+ ≤ Q (one burst from empty does not overflow the X-Stage).
  double q_peak_bytes = 0.0;
  bool capacity_bound_holds = false;
  double capacity_margin_bytes = 0.0;  // Q − q_peak
  double V_max_capacity_bytes = 0.0;   // largest aligned burst that fits: Q + R·T_iss0 (at this T_iss0)
  double V_max_rate_bytes = 0.0;       // largest burst the gap can drain: R·(T_iss0 + G)

  // What the model predicts for the aligned steady state.
  double T_iss_ns = 0.0;           // Eq. 3 combined with Eq. 6 (aligned_issue_time_ns)
  double dT_iss_ns = 0.0;          // T_iss − T_iss0
  double T_period_ns = 0.0;        // T_iss + G
  double T_period_cc_ns = 0.0;     // completion-coupled counterfactual G + V/R
  double T_iso_ns = 0.0;           // Eq. 6

  Verdict verdict = Verdict::piggyback;
  std::string action;  // the recommended action in words, with the numbers that matter
};

// Judges a periodic pattern of aligned bursts of V bytes separated by G. Throws InputError for
// non-finite or non-positive platform numbers, V ≤ 0 or G < 0.
DesignTest design_test(const PlatformPoint& p, double V_bytes, double G_ns);

// Throws InputError unless T_iss0 > 0, R > 0 and Q > 0 (and all finite); `what` names the source.
void validate_platform_point(const PlatformPoint& p, const std::string& what = "platform point");

}  // namespace xstage::model
