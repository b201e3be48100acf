// A fluid, event-driven simulator of the X-Stage: K producers, one shared drain.
//
// Each producer repeats: issue a burst of B bytes, then compute for a gap G with no remote stores.
// Issue is limited per producer to B/T_iss0 (so an unhindered burst takes T_iss0). Accepted bytes enter
// one shared outstanding volume q that drains at R whenever it is non-empty (work-conserving). While
// q is at the capacity Q, total acceptance is throttled to the drain rate R and shared equally among the
// producers that are issuing. Producers may start at different phases and their gaps may jitter.
//
// Between events every rate is constant, so the simulation steps exactly from one event to the next
// (a burst ends, a gap ends, q reaches Q, q empties). It reproduces the closed forms for aligned
// producers in steady state (Eq. 3, 6 and the max law) and shows what staggering does to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/burst_gap.hpp"

namespace xstage::model {

struct SimulationConfig {
  PlatformPoint platform;        // T_iss0, R, Q at this (K, V)
  int K = 0;                     // producers
  double B_bytes = 0.0;          // bytes per producer per burst
  double G_ns = 0.0;             // gap after each burst
  int bursts = 100;              // bursts per producer
  int warmup_bursts = -1;        // bursts per producer left out of the statistics; -1: bursts/2
  double stagger_ns = 0.0;       // producer i starts its first burst at i·stagger/K
  double jitter_ns = 0.0;        // each gap is G + U(−jitter, +jitter), clamped at 0
  std::uint64_t seed = 1;        // for the jitter; the same seed gives the same result
};

// Summary of one sampled quantity (percentiles interpolate between order statistics).
struct Distribution {
  std::size_t count = 0;
  double median = 0.0;
  double p10 = 0.0;
  double p90 = 0.0;
  double mean = 0.0;
  double min = 0.0;
  double max = 0.0;
};
Distribution summarize(std::vector<double> samples);

struct SimulationResult {
  Distribution T_iss_ns;     // per producer per burst (after warm-up)
  Distribution T_period_ns;  // start-to-start, per producer (after warm-up)
  double max_outstanding_bytes = 0.0;
  double throttled_fraction = 0.0;  // share of simulated time spent with q at Q and acceptance throttled
  double makespan_ns = 0.0;         // until the last producer finished its last burst
  std::size_t events = 0;
};

// The simulator's work for K producers x `bursts`, in producer-steps (every event visits every producer, and a run
// has up to a few events per producer burst). One simulate() refuses more than kMaxSimulationWork; `xstage plan
// pattern --simulate` spends that budget on all its gaps together (docs/MODEL.md).
double simulation_work(int K, int bursts);
inline constexpr double kMaxSimulationWork = 2.5e8;

// Throws InputError for invalid configurations (K ≤ 0, B ≤ 0, G < 0, bursts < 1, warm-up ≥ bursts,
// negative stagger or jitter, an invalid platform point, more work than kMaxSimulationWork).
SimulationResult simulate(const SimulationConfig& config);

}  // namespace xstage::model
