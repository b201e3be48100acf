// The calibration sweep on every rank (paper §3.3–3.5): warm the GPU, then for each store path run the
// zero-gap, plateau, gap and isolated sweeps, with the local-memory control beside every remote point
// that needs it. All ranks store concurrently (ring pairing) or rank 0 alone (one-way).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibration/measurement.hpp"
#include "calibration/sweep_plan.hpp"
#include "comm/peer_map.hpp"
#include "comm/runtime.hpp"

namespace xstage::calibration {

struct SweepOptions {
  bool quick = false;
  std::vector<StorePath> paths = {StorePath::st_global_16B, StorePath::tma_bulk};
  comm::Pairing pairing = comm::Pairing::ring;
  std::vector<int> K_fit, K_heldout;  // empty: default_grid()
  std::vector<std::int64_t> B_bytes;  // empty: default_grid()
  bool verify = false;                // check every remote burst's bytes at the receiver
  double warmup_ms = 400;             // sustained load before timing (idle H200s clock down to 345 MHz)
};

struct SweepResult {
  std::vector<BurstSample> samples;          // every rank's samples (gathered on all ranks)
  std::map<StorePath, SweepGrid> grids;      // what was measured, per path
  double seconds = 0;                        // wall time of the sweep on this rank
  double warm_clock_mhz = 0;                 // SM clock after warm-up
  std::int64_t verified_bytes = 0;           // with verify: bytes checked at the receivers, all ranks
  std::int64_t mismatched_words = 0;         // with verify: 16-byte words that arrived wrong
  nlohmann::json device;                     // describe_device() of rank 0's GPU
};

// `progress` receives one-line status updates (rank 0 prints them).
SweepResult run_calibration_sweep(comm::Runtime& rt, const SweepOptions& options,
                                  const std::function<void(const std::string&)>& progress);

}  // namespace xstage::calibration
