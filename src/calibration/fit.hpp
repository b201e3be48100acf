// Fitting the platform triple M_X = (T_iss0(K, V), R, Q(K)) of the Burst–Gap model (paper §3.3–3.6)
// from measured BurstSamples, and validating it on gap sweeps it never saw.
//
// Recipe (docs/CALIBRATION.md, paper §3.3), one store path at a time, each quantity from its own sweep, no refit afterwards:
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
  // Held-out points on the back-pressured branch only (G < G*), where the prediction is non-trivial.
  double period_err_heldout_backpressured_median = 0.0, issue_err_heldout_backpressured_median = 0.0;
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

}  // namespace xstage::calibration
