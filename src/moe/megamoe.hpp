// The fused MegaMoE layer (kernel/megamoe_kernel.cuh) as a MoeLayerImpl (moe/layer.hpp), built from a plan
// (moe/plan.hpp decides everything; the layer only allocates, enqueues and polls): one symmetric window per
// layer, and per call five stream-ordered steps, with no host synchronisation (a captured CUDA graph replays
// them):
//   1. prologue   wait (bounded) until every peer has finished reading this rank's previous call;
//   2. publish    copy (fp8: quantize 1×128) this call's tokens into the window, zero the per-call counters;
//   3. route      per expert, the count and token-ordered list of this rank's (token, k) pairs, with the
//                 router's ids checked: bad ones are dropped and counted (kernel/call_kernels.hpp);
//   4. MegaMoE    the persistent kernel: raise send_ready, dispatch by pulling, Linear-1 + SwiGLU, Linear-2
//                 with remote-store combine, top-k reduction; the last CTA advances the call counter and
//                 signals the peers.
// The call counter lives on the device (comm/device/call_epoch.cuh), so replays count as calls. poll()
// reports, without synchronising, dropped router ids (the layer goes on) and a failure that ended the layer
// (a wait that timed out, a capacity overflow: the ranks' call counts may disagree, so it refuses further
// calls; destroy it on every rank and build a new one).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/call_state.hpp"
#include "comm/runtime.hpp"
#include "common/device_buffer.hpp"
#include "moe/kernel/call_kernels.hpp"
#include "moe/kernel/launch.hpp"
#include "moe/kernel/stats.hpp"
#include "moe/layer.hpp"
#include "moe/plan.hpp"

namespace xstage::moe {

class FusedMoeLayer final : public MoeLayerImpl {
 public:
  // Allocates the plan's symmetric window on every rank (collective: all ranks construct together). The plan
  // must be for this runtime's job (P ranks) and device.
  FusedMoeLayer(const MoeLayerPlan& plan, comm::Runtime& rt);
  FusedMoeLayer(const FusedMoeLayer&) = delete;
  FusedMoeLayer& operator=(const FusedMoeLayer&) = delete;

  void enqueue(const MoeLayerViews& views, cudaStream_t stream) override;
  void poll() override;
  std::string name() const override { return plan_.name(); }
  const MoeLayerPlan& plan() const { return plan_; }
  // Non-blocking: a failure of an earlier call has ended the layer (poll() says which).
  bool ended() const { return state_.failure().has_value(); }

  const SymmetricWindow& window() const { return plan_.window; }
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
    std::vector<MoeDrainRecord> drains;  // [cta][capacity][kTracedStorerWarps]
  };
  std::optional<Trace> read_trace() const;

 private:
  MoeLayerPlan plan_;
  comm::Runtime& rt_;
  std::unique_ptr<comm::SymmetricBuffer> buffer_;
  comm::CallState state_;
  RouterInputMonitor router_input_;
  DeviceBuffer stats_;  // MoeKernelStats, kMoeStats builds only
  DeviceBuffer trace_tiles_, trace_drains_, trace_anchors_;  // MoeTrace, kMoeStats builds only
  MegaMoeLaunch launch_;  // everything but the call's operands
};

}  // namespace xstage::moe
