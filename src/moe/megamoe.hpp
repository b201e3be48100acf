// The fused MegaMoE layer (kernel/megamoe_kernel.cuh) as a MoeLayerImpl: one symmetric window per layer,
// and per call five stream-ordered steps, with no host synchronisation (a captured CUDA graph replays them):
//   1. prologue   wait (bounded) until every peer has finished reading this rank's previous call;
//   2. publish    copy (fp8: quantize 1×128) this call's tokens into the window, zero the per-call counters;
//   3. route      per expert, the count and token-ordered list of this rank's (token, k) pairs, with the
//                 router's ids checked (kernel/call_kernels.hpp);
//   4. MegaMoE    the persistent kernel: raise send_ready, dispatch by pulling, Linear-1 + SwiGLU, Linear-2
//                 with remote-store combine, top-k reduction; the last CTA advances the call counter and
//                 signals the peers.
// The call counter lives on the device (comm/device/call_epoch.cuh), so replays count as calls. poll()
// reports a device-side failure of any earlier call (a wait that timed out, bad router input) without
// synchronising; after a failure the layer refuses further calls (the ranks' call counts may disagree).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/call_state.hpp"
#include "comm/runtime.hpp"
#include "moe/harness/layer.hpp"
#include "moe/kernel/launch.hpp"
#include "moe/kernel/stats.hpp"
#include "moe/problem/layout.hpp"

namespace xstage::moe {

struct FusedMoeOptions {
  // true: schedule, wave_lag, cluster_n and cluster_m are chosen for the problem when the layer is built
  // (choose_schedule, schedule/auto_schedule.hpp: the lockstep makespan, mainloop factors, a routing-skew hedge,
  // the X-Stage audit's stall and the weight re-reads, at the balanced load and H200's calibrated M_X); the four
  // fields below are then ignored.
  bool automatic = false;
  MoeScheduleKind schedule = MoeScheduleKind::interleaved;
  int D_rows = 0;                 // interleaved lead; 0 = interleave_lead_rows (schedule_host.hpp)
  int wave_experts = 0;           // expert-wave size; 0 = wave_size_experts heuristic
  int wave_lag = 0;               // expert-wave λ: 0 = the paper's baseline, 1 = pipelined waves (scheduler.hpp)
  int cluster_n = 0;              // CTAs per cluster sharing A by multicast: 1, 2, or 0 = pairs for the interleaved schedule where the tiles pair up
  int cluster_m = 1;              // 2: M-pairs on 256-row scheduler rows (scheduler.hpp's MixedPairTiling: share B, or A on an expert's half-empty last row)
  double capacity_slack = 0.0;    // dispatch capacity = expected load × slack; 0 = worst case (never overflows)
  double timeout_s = 10.0;        // every device-side wait
};

class FusedMoeLayer final : public MoeLayerImpl {
 public:
  // Allocates the symmetric window on every rank (collective: all ranks construct together).
  FusedMoeLayer(const MoeProblem& problem, comm::Runtime& rt, const FusedMoeOptions& options);
  FusedMoeLayer(const FusedMoeLayer&) = delete;
  FusedMoeLayer& operator=(const FusedMoeLayer&) = delete;

  void enqueue(const MoeLayerViews& views, cudaStream_t stream) override;
  void poll() const override;
  std::string name() const override;
  // Why the schedule is what it is: choose_schedule's reason (automatic), or "as configured".
  const std::string& schedule_reason() const { return schedule_reason_; }

  const SymmetricWindow& window() const { return window_; }
  // Calls the device has completed (blocking; tests and reports).
  std::uint32_t calls_done() const { return state_.calls_done(); }
  // The last call's kernel statistics (blocking), or nullopt in a build without them (kMoeStats).
  std::optional<MoeKernelStats> read_stats() const;
  // CTA tiles of each stage this rank ran in the last call (blocking): the routing's scheduler rows times P1
  // (Linear-1) and P2 (Linear-2) CTA tiles per row.
  struct TilesRun {
    std::uint32_t l1 = 0, l2 = 0;
  };
  TilesRun read_tiles_run() const;
  // The last call's per-tile trace (blocking), or nullopt in a build without it (kMoeStats): per CTA its
  // anchors and records, `capacity` slots each.
  struct Trace {
    int capacity = 0;
    std::vector<MoeCtaAnchor> anchors;
    std::vector<MoeTileRecord> tiles;    // [cta][capacity]
    std::vector<MoeDrainRecord> drains;  // [cta][capacity]
  };
  std::optional<Trace> read_trace() const;
  int D_rows() const { return D_rows_; }
  int wave_experts() const { return wave_experts_; }
  int grid() const { return grid_; }
  MegaMoeConfigId config() const { return config_; }

 private:
  MoeProblem pr_;
  comm::Runtime& rt_;
  FusedMoeOptions opt_;
  std::string schedule_reason_ = "as configured";
  SymmetricWindow window_;
  std::unique_ptr<comm::SymmetricBuffer> buffer_;
  comm::CallState state_;
  DeviceBuffer stats_;  // MoeKernelStats, kMoeStats builds only
  DeviceBuffer trace_tiles_, trace_drains_, trace_anchors_;  // MoeTrace, kMoeStats builds only
  MegaMoeLaunch launch_;  // everything but the call's operands
  MegaMoeConfigId config_{};
  int grid_ = 0, D_rows_ = 1, wave_experts_ = 1, cluster_n_ = 1, cluster_m_ = 1;
};

}  // namespace xstage::moe
