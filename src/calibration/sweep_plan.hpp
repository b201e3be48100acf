// What `xstage calibrate` measures: the grids of K, B and G for each sweep (paper §3.3), as pure
// functions of the GPU's SM count and the user's options, so they are testable without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calibration/measurement.hpp"

namespace xstage::calibration {

struct SweepGrid {
  std::vector<int> K_fit;          // producers used by the fits (zero-gap, plateau, isolated)
  std::vector<int> K_heldout;      // producers used only to score predictions (gap sweeps)
  std::vector<std::int64_t> B_bytes;       // zero-gap, plateau and isolated sweeps
  std::int64_t gap_sweep_B_bytes = 32768;  // the per-producer burst of the gap sweeps
  int gap_points = 16;                      // gap sweep: G from 0 to 3·V/R
  int isolated_bursts = 24;
};

// Default grids for a GPU with `sm_count` SMs and one store path: K_fit = {S/8, S/4, S/2, S},
// K_heldout = {~0.18·S, ~0.75·S} (never in K_fit), B from 4 KiB to 256 KiB (TMA: 128 KiB, the
// shared-memory source limit). `quick` trims every grid for a fast check.
SweepGrid default_grid(int sm_count, StorePath path, bool quick);

// Checks user-supplied grids against the GPU (K ≤ SMs, B a multiple of the store quantum and within the
// path's limit); throws InputError naming the bad value.
void validate_grid(const SweepGrid& grid, int sm_count, StorePath path);

// The gaps of one gap sweep: `points` values from 0 to 3·V/R (R from the zero-gap sweep), so both
// branches of the max law and the knee between them are sampled.
std::vector<double> gap_sweep_ns(std::int64_t V_bytes, double R_bytes_per_ns, int points);

// A gap long enough that the burst has fully recovered: 2·V/R + 2 µs.
double plateau_gap_ns(std::int64_t V_bytes, double R_bytes_per_ns);

// How long a periodic launch runs when one burst period is about `period_ns`: at least 500 µs (launch
// overhead and the clock measurement then stay near 1%) and at least 32 periods.
double periodic_duration_ns(double period_ns);

// Rough R from zero-gap samples before the fit: the median of V/T_period over remote points whose
// volume is far beyond what issue alone could explain (largest third of V). Throws if there are none.
double rough_R_bytes_per_ns(const std::vector<BurstSample>& zero_gap_remote);

// Parses "16,33,66" into integers (InputError naming `what` on bad items).
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

}  // namespace xstage::calibration
