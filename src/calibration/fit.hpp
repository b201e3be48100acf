// Fitting the platform triple M_X = (T_iss0(K, V), R, Q(K)) of the Burst–Gap model (paper §3.3–3.6)
// from measured BurstSamples, and validating it on gap sweeps it never saw.
//
// Recipe (BRIEF §2), one store path at a time, each quantity from its own sweep, no refit afterwards:
//   T_iss0 : plateau sweep (periodic, remote, large G): T_iss0(K, B) = measured T_iss, one grid point per
//            (K, B), median over ranks.
//   R      : zero-gap sweep (periodic, G = 0): on drain-dominated remote points T_period = V / R (eq. 2);
//            R = median of V / T_period per rank, then median across ranks.
//   Q(K)   : isolated sweep: on the drain branch T_iso = (V − Q) / R (eq. 6), so Q_i = V − R·T_iso;
//            Q(K) = median of Q_i over branch points (all ranks).
//   check  : gap sweeps predicted with T_iss = max(T_iss0, V/R − G) (eq. 3) and
//            T_period = max(T_iss0 + G, V/R) (eq. 4), split into held-out K and fit K.
// The criteria and thresholds are documented at the top of fit.cpp; the numbers behind every choice
// go into triple.fit (JSON) so a platform file explains itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calibration/measurement.hpp"
#include "model/platform.hpp"

namespace xstage::calibration {

struct FitReport {
  model::PlatformTriple triple;  // R, T_iss0 grid, Q(K); triple.fit holds the diagnostics JSON
  // Validation numbers (also inside triple.fit). NaN where the samples had nothing to measure them on.
  double R_over_wall_median = 0.0;  // R_fit / wall_bytes_per_ns over the drain-dominated points
  double period_err_heldout_median = 0.0, issue_err_heldout_median = 0.0;  // |rel err|, held-out K
  double period_err_fit_median = 0.0, issue_err_fit_median = 0.0;          // |rel err|, fit K
  double period_err_completion_coupled_median = 0.0;  // G + V/R at held-out K, for contrast
  double local_control_flatness = 0.0;  // max/min − 1 of local T_iss over a gap sweep, worst (K, B, rank)
  std::vector<std::string> warnings;    // e.g. "no knee for K=16 below V=4.00 MiB"
};

// Fits the triple for `path` from `samples` (samples of other paths are ignored). `held_out_K` are the
// producer counts kept out of every fit and used only to score the predictions. Throws InputError when
// the samples cannot support a fit (no plateau points, no drain-dominated zero-gap point, no capacity
// knee at any K, untagged samples, ...), saying what to measure instead. A triple it returns passes
// model::validate_platform (R > 0, non-empty T_iss0 grid and Q list, positive values).
FitReport fit_platform_triple(const std::vector<BurstSample>& samples, model::StorePath path,
                              const std::vector<int>& held_out_K);

// T_iss0 at any (K, B) from the measured grid: linear in B within each grid K (linear extrapolation
// along the end segment outside the measured B, never decreasing in B, never below the proportional
// scaling of the first point), then linear in K between the two grid K around K (clamped to the
// nearest grid K outside). Throws InputError on an empty grid or K, B ≤ 0. Same as
// model::interpolate_T_iss0_ns inside the grid; outside it the model clamps to the edge while this
// extends the end segment (the fit only queries inside the grid). Because ADL also finds the model's
// overload (double B), pass B as std::int64_t or qualify the call.
double interpolate_T_iss0_ns(const model::PlatformTriple& triple, int K, std::int64_t B_bytes);

// The closed-form Burst–Gap predictions (paper eqs. 3, 4, 6), one implementation for fit, driver and
// planner. G is the gap actually measured.
double predict_T_iss_ns(const model::PlatformTriple& triple, int K, std::int64_t B_bytes, double G_ns);
double predict_T_period_ns(const model::PlatformTriple& triple, int K, std::int64_t B_bytes, double G_ns);
// Isolated burst: max(T_iss0, (V − Q)/R). With no Q(K) measured near K the capacity branch is
// unknown; Q(K) is interpolated linearly in K between measured points and clamped outside; with no Q
// at all the function returns T_iss0 (no capacity limit known).
double predict_T_iso_ns(const model::PlatformTriple& triple, int K, std::int64_t B_bytes);

}  // namespace xstage::calibration
