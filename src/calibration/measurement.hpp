// What one remote-store microbenchmark point measured, summarised over producers and bursts.
// The kernels (src/calibration/store_bench.cu) record per-burst, per-producer clock64 stamps; the
// driver (src/calibration/sweep.cpp) turns them into one BurstSample per (mode, path, destination, K,
// B, G). The fit (src/calibration/fit.hpp) consumes only BurstSamples, so it is testable on the CPU
// with synthetic data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/platform.hpp"

namespace xstage::calibration {

using model::StorePath;

// Periodic: every producer repeats (burst of B bytes, gap G) freely; steady state after warm-up bursts.
// Isolated: all producers start one burst together (aligned) after the X-Stage has fully drained.
enum class Mode { periodic, isolated };
// Remote: stores go to a peer GPU over NVLink. Local: the same loop into this GPU's own memory (control).
enum class Destination { remote, local };
// Which calibration sweep a sample belongs to (paper §3.3). The fit uses zero_gap (R), plateau (T_iss0)
// and isolated (Q); gap samples are only predicted, never fitted, so the tag keeps a gap-sweep point
// that happens to sit at G = 0 or at a large G out of the fit. `unset` is rejected by the fit.
enum class Sweep { unset, zero_gap, plateau, gap, isolated };

const char* to_string(Mode mode);
const char* to_string(Destination dest);
const char* to_string(Sweep sweep);

struct BurstSample {
  Sweep sweep = Sweep::unset;     // which sweep produced it (set by the driver)
  Mode mode = Mode::periodic;
  StorePath path = StorePath::st_global_16B;
  Destination dest = Destination::remote;
  int K = 0;                      // concurrent producers (CTAs, one per SM)
  std::int64_t B_bytes = 0;       // bytes per producer per burst
  double gap_ns_requested = 0.0;  // G asked for
  double gap_ns = 0.0;            // G measured (median over producers and bursts)
  double T_iss_ns = 0.0;          // sender-visible issue time of one burst, median
  double T_iss_p10_ns = 0.0;
  double T_iss_p90_ns = 0.0;
  double T_period_ns = 0.0;       // start-to-start period, median (periodic mode; 0 for isolated)
  double wall_bytes_per_ns = 0.0; // bytes stored over the launch's wall-clock time (events), all ranks' view of this rank
  double sm_clock_mhz = 0.0;      // measured in the same launch (clock64 vs %globaltimer)
  int n_bursts = 0;               // bursts per producer that entered the medians
  int rank = 0;                   // which rank measured it (every rank stores concurrently)

  std::int64_t V_bytes() const { return static_cast<std::int64_t>(K) * B_bytes; }
};

// CSV with a header row; the raw artefact `xstage calibrate` writes next to the platform file.
void write_samples_csv(const std::string& path, const std::vector<BurstSample>& samples);
std::vector<BurstSample> read_samples_csv(const std::string& path);

}  // namespace xstage::calibration
