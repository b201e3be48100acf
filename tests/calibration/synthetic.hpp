// Synthetic BurstSamples from a known Burst–Gap triple, with the sweep structure of `xstage calibrate`
// (paper §3.3 and src/calibration/fit.hpp) and seeded multiplicative noise. Shared by the calibration tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "calibration/measurement.hpp"

namespace xstage::calibration::testing {

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// The truth the fit should recover: R, T_iss0(K, B) = T_fixed + B / issue_rate, Q(K) = Q_full·min(1, K/K_full).
struct Truth {
  double R_bytes_per_ns = 600.0;
  double T_fixed_ns = 150.0;
  double issue_bytes_per_ns = 20.0;  // per producer
  double Q_full_bytes = 2.5 * kMiB;
  int Q_full_K = 66;
  double wall_efficiency = 0.98;     // wall-clock rate / (V / T_period): launch overhead
  // 0: the model's hard max. p > 0: a rounded corner (a^p + b^p)^(1/p), as real queues blend branches.
  double corner_p = 0.0;

  double max_law(double a, double b) const {
    if (corner_p <= 0) return std::max(a, b);
    a = std::max(a, 0.0);  // a negative branch (V < Q) must not count through the even power
    b = std::max(b, 0.0);
    const double m = std::max(a, b);
    return m * std::pow(std::pow(a / m, corner_p) + std::pow(b / m, corner_p), 1.0 / corner_p);
  }

  double T_iss0_ns(int K, std::int64_t B) const { return T_fixed_ns + B / issue_bytes_per_ns; }
  double Q_bytes(int K) const { return Q_full_bytes * std::min(1.0, double(K) / Q_full_K); }
};

struct SweepPlan {
  StorePath path = StorePath::st_global_16B;
  std::vector<int> grid_K = {16, 33, 66, 132};
  std::vector<int> gap_fit_K = {132, 66};
  std::vector<int> gap_held_out_K = {24, 99};
  int ranks = 2;
  double noise = 0.03;  // each measured time × (1 + U(−noise, +noise))
  unsigned seed = 12345;
};

inline std::vector<std::int64_t> periodic_B_grid(StorePath path) {
  std::vector<std::int64_t> B;
  const std::int64_t B_max = path == StorePath::tma_bulk ? 128 * 1024 : 256 * 1024;
  for (std::int64_t b = 4 * 1024; b <= B_max; b *= 2) B.push_back(b);
  return B;
}

inline std::vector<std::int64_t> isolated_B_grid(StorePath path) {
  std::vector<std::int64_t> B;
  const std::int64_t B_max = path == StorePath::tma_bulk ? 128 * 1024 : 256 * 1024;
  for (std::int64_t b = 4 * 1024; b <= B_max; b *= 2) {  // 4, 6, 8, 12, ... KiB: ~12 values
    B.push_back(b);
    if (b * 3 / 2 <= B_max && b < B_max) B.push_back(b * 3 / 2);
  }
  return B;
}

inline std::vector<BurstSample> make_synthetic_samples(const Truth& truth, const SweepPlan& plan) {
  std::mt19937 rng(plan.seed);
  std::uniform_real_distribution<double> unit(-plan.noise, plan.noise);
  auto noisy = [&](double x) { return x * (1.0 + unit(rng)); };
  std::vector<BurstSample> out;

  // One sample from the fluid model: eqs. 3/4 for periodic bursts, eq. 6 for isolated ones; the local
  // control is the issue-only loop (T_iss0) whatever the gap.
  auto emit = [&](Sweep sweep, Destination dest, int K, std::int64_t B, double G, int rank) {
    const double V = double(K) * B, R = truth.R_bytes_per_ns, T0 = truth.T_iss0_ns(K, B);
    const bool remote = dest == Destination::remote;
    BurstSample s;
    s.sweep = sweep;
    s.mode = sweep == Sweep::isolated ? Mode::isolated : Mode::periodic;
    s.path = plan.path;
    s.dest = dest;
    s.K = K;
    s.B_bytes = B;
    s.rank = rank;
    s.gap_ns_requested = G;
    s.gap_ns = noisy(G);
    double T_iss_true, T_period_true = 0.0;
    if (s.mode == Mode::isolated) {
      T_iss_true = remote ? truth.max_law(T0, (V - truth.Q_bytes(K)) / R) : T0;
    } else {
      T_period_true = remote ? truth.max_law(T0 + s.gap_ns, V / R) : T0 + s.gap_ns;
      T_iss_true = T_period_true - s.gap_ns;
    }
    s.T_iss_ns = noisy(T_iss_true);
    s.T_iss_p10_ns = 0.97 * s.T_iss_ns;
    s.T_iss_p90_ns = 1.03 * s.T_iss_ns;
    s.T_period_ns = s.mode == Mode::isolated ? 0.0 : noisy(T_period_true);
    s.wall_bytes_per_ns = s.mode == Mode::isolated ? 0.0 : noisy(truth.wall_efficiency * V / T_period_true);
    s.sm_clock_mhz = 1980.0;
    s.n_bursts = s.mode == Mode::isolated ? 20 : 64;
    out.push_back(s);
  };

  for (int rank = 0; rank < plan.ranks; ++rank) {
    for (int K : plan.grid_K) {
      for (std::int64_t B : periodic_B_grid(plan.path)) {
        const double V_over_R = double(K) * B / truth.R_bytes_per_ns;
        for (Destination d : {Destination::remote, Destination::local}) emit(Sweep::zero_gap, d, K, B, 0.0, rank);
        emit(Sweep::plateau, Destination::remote, K, B, 2.0 * V_over_R + 2000.0, rank);
      }
      for (std::int64_t B : isolated_B_grid(plan.path))
        for (Destination d : {Destination::remote, Destination::local}) emit(Sweep::isolated, d, K, B, 0.0, rank);
    }
    std::vector<int> gap_K = plan.gap_fit_K;
    gap_K.insert(gap_K.end(), plan.gap_held_out_K.begin(), plan.gap_held_out_K.end());
    for (int K : gap_K) {
      const std::int64_t B = 32 * 1024;
      const double V_over_R = double(K) * B / truth.R_bytes_per_ns;
      for (int j = 0; j < 16; ++j)
        for (Destination d : {Destination::remote, Destination::local})
          emit(Sweep::gap, d, K, B, 3.0 * V_over_R * j / 15.0, rank);
    }
  }
  return out;
}

}  // namespace xstage::calibration::testing
