#include "moe/megamoe.hpp"

#include <cuda_runtime.h>

#include <string>

#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "moe/fp8/quantize_device.hpp"
#include "moe/kernel/status.hpp"

namespace xstage::moe {

FusedMoeLayer::FusedMoeLayer(const MoeLayerPlan& plan, comm::Runtime& rt)
    : plan_(plan), rt_(rt), state_(rt.rank(), plan.timeout_s), router_input_(rt.rank()) {
  const MoeProblem& pr = plan_.problem;
  require_sm90(rt.device());
  XSTAGE_REQUIRE(pr.P_ranks == rt.world_size(),
                 "MegaMoE: the plan is for P = " + std::to_string(pr.P_ranks) + " ranks but the job has " + std::to_string(rt.world_size()));
  XSTAGE_REQUIRE(pr.P_ranks <= rt.lsa_size(), "MegaMoE: every rank must reach every other by NVLink loads/stores (LSA team of " +
                                                  std::to_string(rt.lsa_size()) + " < " + std::to_string(pr.P_ranks) + " ranks)");
  XSTAGE_REQUIRE(plan_.grid == device_facts(rt.device()).sm_count,
                 "MegaMoE: the plan is for a GPU with " + std::to_string(plan_.grid) + " SMs; this rank's has " +
                     std::to_string(device_facts(rt.device()).sm_count));

  buffer_ = std::make_unique<comm::SymmetricBuffer>(rt_, static_cast<std::size_t>(plan_.window.total_bytes));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(buffer_->local(), 0, plan_.window.total_bytes, rt_.stream()));
  if constexpr (kMoeStats) {
    stats_ = DeviceBuffer(sizeof(MoeKernelStats));
    // Records per CTA: its share of every CTA tile the window's rows can hold, and some slack for uneven walks.
    const std::int64_t cta_tiles = static_cast<std::int64_t>(plan_.window.dispatch.max_scheduler_rows()) * plan_.cluster_m *
                                   (pr.P1_l1_n_blocks() + pr.P2_l2_n_blocks());
    launch_.trace.capacity = static_cast<int>((cta_tiles + plan_.grid - 1) / plan_.grid + 16);
    trace_tiles_ = DeviceBuffer(sizeof(MoeTileRecord) * plan_.grid * launch_.trace.capacity);
    trace_drains_ = DeviceBuffer(sizeof(MoeDrainRecord) * plan_.grid * launch_.trace.capacity * kTracedStorerWarps);
    trace_anchors_ = DeviceBuffer(sizeof(MoeCtaAnchor) * plan_.grid);
    launch_.trace.tiles = trace_tiles_.get<MoeTileRecord>();
    launch_.trace.drains = trace_drains_.get<MoeDrainRecord>();
    launch_.trace.anchors = trace_anchors_.get<MoeCtaAnchor>();
  }

  launch_.problem = pr;
  launch_.window = plan_.window;
  launch_.local = static_cast<char*>(buffer_->local());
  for (int r = 0; r < pr.P_ranks; ++r)
    launch_.peer[r] = r == rt_.rank() ? launch_.local : static_cast<char*>(buffer_->peer_pointer(r));
  launch_.rank = rt_.rank();
  launch_.device = rt_.device();
  launch_.grid = plan_.grid;
  launch_.schedule = plan_.schedule;
  launch_.D_rows = plan_.D_rows;
  launch_.wave_experts = plan_.wave_experts;
  launch_.wave_lag = plan_.wave_lag;
  launch_.wait = state_.wait_context();
  launch_.calls = state_.epoch_view();
  launch_.stats = stats_.get<MoeKernelStats>();
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(rt_.stream()));
  rt_.barrier();  // every window is zeroed (epochs included) before any rank's first call
}

namespace {

// How to go on after a failure that ended the layer.
constexpr const char* kRecovery =
    "; the layer has ended (its ranks may disagree on how many calls ran): destroy it on every rank and build a new one";

}  // namespace

void FusedMoeLayer::poll() {
  if (const auto failure = state_.failure()) throw PlatformError(describe(*failure, state_.timeout_s()) + kRecovery);
  if (auto dropped = router_input_.take()) throw InputError(*dropped);
}

void FusedMoeLayer::enqueue(const MoeLayerViews& v, cudaStream_t stream) {
  const MoeProblem& pr = plan_.problem;
  XSTAGE_REQUIRE(v.tokens >= 0 && v.tokens <= pr.T_tokens,
                 "MegaMoE: " + std::to_string(v.tokens) + " tokens, the layer was built for at most T = " + std::to_string(pr.T_tokens));
  XSTAGE_REQUIRE((v.tokens == 0 || (v.tokens_bf16 && v.topk_ids && v.topk_weights && v.out_bf16)) && v.W1 && v.W2,
                 "MegaMoE: an operand is missing (null pointer)");
  XSTAGE_REQUIRE(pr.dtype == DType::bf16 || (v.W1_scales && v.W2_scales), "MegaMoE fp8: the weights come without their scales");
  if (const auto failure = state_.failure())
    throw PlatformError("MegaMoE: an earlier call failed (" + describe(*failure, state_.timeout_s()) + ")" + kRecovery);
  const SymmetricWindow& window = plan_.window;
  char* local = launch_.local;
  const bool fp8 = pr.dtype == DType::fp8_e4m3;
  // Waits for the peers to have read this rank's data of the previous call, zeroes the counters, copies the bf16
  // tokens into the window, routes.
  enqueue_call_start(v.topk_ids, fp8 || v.tokens == 0 ? nullptr : v.tokens_bf16, v.tokens, pr, rt_.rank(), plan_.grid, local,
                     window, router_input_.device(), launch_.wait, launch_.calls, stream);
  if constexpr (kMoeStats) XSTAGE_CUDA_CHECK(cudaMemsetAsync(stats_.get(), 0, stats_.bytes(), stream));
  if (v.tokens > 0 && fp8)  // W8A8: each source quantizes its own tokens 1×128
    quantize_rows_fp8(static_cast<const __nv_bfloat16*>(v.tokens_bf16), pr.h_hidden, v.tokens, pr.h_hidden,
                      reinterpret_cast<std::uint8_t*>(local + window.tokens.region.offset_bytes), window.tokens.row_pitch_bytes,
                      reinterpret_cast<float*>(local + window.tokens.scales.offset_bytes), window.tokens.scale_blocks, 1, stream);

  MegaMoeLaunch l = launch_;
  l.tokens = v.tokens;
  l.topk_weights = v.topk_weights;
  l.out = v.out_bf16;
  l.W1 = v.W1;
  l.W2 = v.W2;
  l.W1_scales = v.W1_scales;
  l.W2_scales = v.W2_scales;
  launch_megamoe(plan_.config, l, stream);
}

FusedMoeLayer::TilesRun FusedMoeLayer::read_tiles_run() const {
  TilesRun t;
  XSTAGE_CUDA_CHECK(cudaMemcpy(&t.l1, launch_.local + plan_.window.counters.l1_tiles_run(), 4, cudaMemcpyDeviceToHost));
  XSTAGE_CUDA_CHECK(cudaMemcpy(&t.l2, launch_.local + plan_.window.counters.l2_tiles_run(), 4, cudaMemcpyDeviceToHost));
  return t;
}

std::optional<FusedMoeLayer::Trace> FusedMoeLayer::read_trace() const {
  if constexpr (!kMoeStats) return std::nullopt;
  Trace t;
  t.capacity = launch_.trace.capacity;
  t.anchors.resize(plan_.grid);
  t.tiles.resize(static_cast<std::size_t>(plan_.grid) * t.capacity);
  t.drains.resize(t.tiles.size() * kTracedStorerWarps);
  XSTAGE_CUDA_CHECK(cudaMemcpy(t.anchors.data(), trace_anchors_.get(), trace_anchors_.bytes(), cudaMemcpyDeviceToHost));
  XSTAGE_CUDA_CHECK(cudaMemcpy(t.tiles.data(), trace_tiles_.get(), trace_tiles_.bytes(), cudaMemcpyDeviceToHost));
  XSTAGE_CUDA_CHECK(cudaMemcpy(t.drains.data(), trace_drains_.get(), trace_drains_.bytes(), cudaMemcpyDeviceToHost));
  return t;
}

std::optional<MoeKernelStats> FusedMoeLayer::read_stats() const {
  if constexpr (!kMoeStats) return std::nullopt;
  MoeKernelStats st{};
  XSTAGE_CUDA_CHECK(cudaMemcpy(&st, stats_.get(), sizeof st, cudaMemcpyDeviceToHost));
  return st;
}

}  // namespace xstage::moe
