// The MegaMoE schedule chosen per layer before launch (docs/MOE.md, "Choosing the schedule per layer").
//
// Plain C++, called when the layer is built, before any routing is known: it assumes the balanced load
// (T·k rows per owner, T·k/E_local per local expert). For each schedule the kernel builds — expert-wave,
// pipelined waves (λ = 1), interleaved (CTA pairs where the tiles pair up, FusedMoeLayer's automatic
// cluster_n), and the same three on M-pairs where the balanced load makes every expert fill a pair's 256
// rows — it predicts the tile phase
//
//   T(v) = M(v) · f(v) · (1 + h(v)) + Δt(v) + c_reread · B_reread(v) / BW_HBM
//
//   M(v)        makespan of the lockstep simulation of every CTA's own walk (schedule_host.hpp's
//               simulate_ctas) at the balanced load, tile times from an assumed throughput with ±10% seeded
//               jitter: the dependency waits (wave boundaries, L1 stragglers) that the X-Stage model does not price;
//   f(v)        the mainloop cost of what the lockstep does not see: interleaved bf16 1.073 / fp8 0.970 (the
//               L2's load with two experts' weights streaming), pipelined waves 1.11 (two waves' weights in
//               flight), M-pairs 0.939 (each weight tile fetched once per pair);
//   h(v)        a hedge for the routing skew no one knows yet: waves +1.45%, M-pairs +3.2% (half of what
//               Zipf-1.2 routing cost them on the one-GPU grid);
//   Δt(v)       the MoE audit's predicted X-Stage stall per CTA (Σ Δt over its Linear-2 tiles, from the
//               aligned lockstep: the worst case for the combine bursts);
//   B_reread(v) weight bytes read from HBM again because the rows that use a weight tile do not run while
//               it is in L2 (a pass model for single CTAs, auto_schedule.cpp; M-pairs taken to read once),
//               beyond the fewest any schedule reads;
//
// and takes the smallest. Every constant is in ScheduleRule with where it comes from.
//
//   moe::ScheduleChoice c = moe::choose_schedule(problem, K_SM);  // H200 default M_X, or pass a PlatformPoint
//   options.schedule = c.schedule; options.wave_lag = c.wave_lag; options.cluster_n = c.cluster_n;
//   options.cluster_m = c.cluster_m;   // c.reason says why, in words
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/burst_gap.hpp"
#include "moe/problem/problem.hpp"
#include "moe/schedule/schedule_host.hpp"
#include "moe/schedule/schedule_kind.hpp"

namespace xstage::moe {

// M_X of 2 × H200 over NVLink4 for the combine bursts of one 128 × 256 bf16 Linear-2 tile's remote half at
// P = 2 (32 KiB), at K = 132: platforms/h200_nvlink4.json (xstage calibrate, docs/CALIBRATION.md),
// st_global_16B: T_iss0(132, 32 KiB) = 616.3 ns, R = 365.8 GB/s, Q(132) = 1605251 B. The audit scales the issue
// time with each tile's bytes at this point's rate (B / T_iss0 = 53.2 GB/s per CTA), which the calibration
// shows is flat in B from 16 to 256 KiB (52–53 GB/s).
inline constexpr model::PlatformPoint kH200NvLink4Point{616.33680404384, 365.8152418837549, 1605251.1182667457};
inline constexpr double kH200NvLink4PointBytes = 32768.0;  // the B that point was evaluated at

// The rule's constants (docs/MOE.md states the rule with them and where each comes from).
struct ScheduleRule {
  double tflops_bf16 = 550.0;    // tile-phase throughput for the tile times: bf16 550 (5.07-5.26 ms for 2.89 TFLOP)
  double tflops_fp8 = 790.0;     // fp8 790 (5.77 TFLOP in 7.27 ms of tiles)
  double time_jitter = 0.10;     // ±10% per tile in the lockstep: a wave boundary waits for the slowest of many tiles;
                                 // the score on the committed grid is flat from 0 to ±30%
  std::uint64_t seed = 1;
  // The mainloop factors: geomean over the one-GPU grid's balanced configurations (docs/MOE.md names the run) of
  // (measured / lockstep) for the variant over the same for expert-wave on single CTAs, where the pass model
  // predicts no re-reads for either.
  double factor_interleaved_bf16 = 1.073;  // 11 configurations
  double factor_interleaved_fp8 = 0.970;   // 13 configurations
  double factor_pipelined = 1.11;          // pipelined waves read 15.0 GB from DRAM vs 13.5 GB (waves), kept: the
                                           // timing geomean as above (1.032) scores worse (docs/MOE.md)
  double factor_m_pairs = 0.939;           // each M-pairs variant over its single-CTA twin, >= 256 rows, 48 pairs
  // Routing is unknown when the layer is built: charge each schedule half of what skewed routing (Zipf 1.2) cost
  // it on the one-GPU grid, as if balanced and skewed were equally likely: expert-wave and pipelined waves 2.9%
  // (geomean over the 30 balanced/skewed pairs of (wave/interleaved skewed) / (wave/interleaved balanced)),
  // M-pairs 6.4% (the same for each M-pairs variant against its single-CTA twin, 48 pairs at >= 256 rows).
  double skew_hedge_waves = 0.0145;
  double skew_hedge_m_pairs = 0.032;
  int m_pairs_min_rows = 256;    // M-pairs only if every expert's balanced load fills a pair's 256 rows (at <= 128
                                 // balanced rows the best M-pairs variant measured 8-21% slower than the best)
  double l2_bytes = 62914560.0;  // H200 L2 (cudaDevAttrL2CacheSize)
  double hbm_bytes_per_ns = 4800.0;  // H200 HBM3e peak, 4.8 TB/s
  double reread_cost = 0.5;      // share of the re-read time not hidden behind the mainloop (fitted on the 2-GPU
                                 // grid's Mixtral-like rows, its only shape with re-reads)
  int ticks_per_tile = 16;       // lockstep resolution
  double latency_ns = 1000.0;    // fence latency T_lat for the audit's Δt
};

// One candidate as the rule priced it.
struct ScheduleCandidate {
  ScheduleVariant variant;
  bool applies = false;            // the kernel builds it for this problem (and M-pairs pass the row test)
  std::string why_not;             // when !applies
  double makespan_ns = 0.0;        // M(v)
  double dependency_wait_ns = 0.0; // of M(v): per CTA, waiting for counters
  double factor = 1.0;             // f(v)·(1 + h(v))
  double stall_ns = 0.0;           // Δt(v): Σ over a CTA's tiles, mean CTA (aligned audit)
  double hbm_weight_bytes = 0.0;   // weight bytes read from HBM (pass model)
  double reread_ns = 0.0;          // c_reread · B_reread / BW
  double predicted_ns = 0.0;       // T(v)
  double K_act_mean = 0.0;         // the aligned audit's predicted K_act (for the record)
};

struct ScheduleChoice {
  MoeScheduleKind schedule = MoeScheduleKind::interleaved;
  int wave_lag = 0;    // FusedMoeOptions::wave_lag
  int cluster_n = 1;   // FusedMoeOptions::cluster_n (explicit: 1 or 2)
  int cluster_m = 1;   // FusedMoeOptions::cluster_m
  std::string reason;  // in words, with the numbers that decided it
  // Predicted terms of the chosen candidate and of the best other one.
  ScheduleCandidate chosen;
  ScheduleCandidate runner_up;
  std::vector<ScheduleCandidate> candidates;  // every one considered, in kernel_variants order
  double K_SM = 0;
  int rows_per_expert = 0;  // the balanced load it assumed
};

// Throws InputError for an invalid problem, K_SM < 1 or an invalid platform point. `platform` is M_X for one
// full Linear-2 tile's remote bytes (b_m·b_n·s_out·(P-1)/P) at K = K_SM, e.g. from the platform file
// (model::evaluate_platform).
ScheduleChoice choose_schedule(const MoeProblem& problem, int K_SM, const model::PlatformPoint& platform,
                               const ScheduleRule& rule = {});

// kH200NvLink4Point with its issue time scaled to this problem's tile (T_iss0 · B_tile / 32 KiB: the same
// per-CTA issue rate), and the choice on it: what FusedMoeLayer can call on H200 with no platform file.
model::PlatformPoint h200_nvlink4_point(const MoeProblem& problem);
ScheduleChoice choose_schedule(const MoeProblem& problem, int K_SM);

// The same on a given per-expert load instead of the balanced one (the evaluation and tests use it).
ScheduleChoice choose_schedule(const MoeProblem& problem, const std::vector<int>& expert_rows, int K_SM,
                               const model::PlatformPoint& platform, const ScheduleRule& rule = {});

// The pass model alone: weight bytes one owner reads from HBM under a variant (docs/MOE.md); M-pairs are taken to
// read each weight tile once (measured: interleaved M-pairs run 0.74-0.89x the time of single-CTA interleaving
// where the model predicts the single CTAs' re-reads).
double hbm_weight_bytes(const MoeProblem& problem, const std::vector<int>& expert_rows, int K_SM,
                        const ScheduleVariant& variant, double l2_bytes);

}  // namespace xstage::moe
