// The fused MegaMoE layer (megamoe_kernel.cuh) as a MoeLayerImpl: one symmetric window per layer, and per
// forward four stream-ordered steps with no host synchronisation:
//   1. prologue   wait (bounded) until every peer has finished reading this rank's previous call;
//   2. publish    copy this call's tokens into the window, zero the per-call counters, and route: per
//                 expert, the count and token-ordered list of this rank's (token, k) pairs;
//   3. MegaMoE    the persistent kernel: raise send_ready, dispatch by pulling, Linear-1 + SwiGLU,
//                 Linear-2 with remote-store combine, top-k reduction; the last CTA signals the peers;
//   4. finish()   (called by the harness after its timing) synchronises and turns a device-side timeout
//                 or capacity overflow into an error that says what was awaited. The kernel does not trap
//                 (the CUDA context stays usable), but the ranks' call epochs no longer agree after a
//                 failure, so the layer refuses further calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/runtime.hpp"
#include "moe/layer.hpp"
#include "moe/layout.hpp"
#include "moe/megamoe_device.cuh"

namespace xstage::moe {

enum class MoeScheduleKind { expert_wave, interleaved };
const char* to_string(MoeScheduleKind kind);

struct FusedMoeOptions {
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
  ~FusedMoeLayer() override;
  FusedMoeLayer(const FusedMoeLayer&) = delete;
  FusedMoeLayer& operator=(const FusedMoeLayer&) = delete;

  void forward(const LayerInputs& in, LayerOutput& out, cudaStream_t stream) override;
  void finish(cudaStream_t stream) override;
  std::string name() const override;
  std::int64_t last_peer_bytes() const override { return last_peer_bytes_; }

  const SymmetricWindow& window() const { return window_; }
  // Where the last forward's time went (valid after finish()).
  const MoeKernelStats& last_stats() const { return last_stats_; }
  int D_rows() const { return D_rows_; }
  int wave_experts() const { return wave_experts_; }
  int grid() const { return grid_; }

 private:
  // Calls f(std::type_identity<Config>{}) with the kernel configuration this layer runs.
  template <class F>
  void with_config(F&& f) const;
  template <class C>
  void launch(const LayerInputs& in, LayerOutput& out, cudaStream_t stream, std::uint32_t epoch, const WaitContext& ctx);

  MoeProblem pr_;
  comm::Runtime& rt_;
  FusedMoeOptions opt_;
  SymmetricWindow window_;
  std::unique_ptr<comm::SymmetricBuffer> buffer_;
  char* peer_[kMaxEpRanks] = {};
  MoeDeviceStatus* status_ = nullptr;  // host-mapped
  MoeKernelStats* stats_ = nullptr;  // device
  std::uint32_t* aborted_ = nullptr;  // device: a wait failed in this call
  MoeKernelStats last_stats_{};
  std::uint32_t epoch_ = 0;
  int grid_ = 0, D_rows_ = 1, wave_experts_ = 1, cluster_n_ = 1, cluster_m_ = 1;
  bool half_l2_ = false;  // each row's last Linear-2 block is half full (MegaMoeConfig::kHalfL2)
  std::int64_t last_peer_bytes_ = 0;
  std::string failure_;  // set by finish() when a device wait failed; the layer refuses further calls
};

}  // namespace xstage::moe
