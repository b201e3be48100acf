#include "moe/megamoe.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "common/error.hpp"
#include "moe/fp8/quantize_device.hpp"
#include "moe/kernel/call_kernels.hpp"
#include "moe/kernel/status.hpp"
#include "moe/schedule/auto_schedule.hpp"
#include "moe/schedule/schedule_host.hpp"

namespace xstage::moe {

FusedMoeLayer::FusedMoeLayer(const MoeProblem& pr, comm::Runtime& rt, const FusedMoeOptions& opt)
    : pr_(pr), rt_(rt), opt_(opt), state_(rt.rank(), opt.timeout_s) {
  validate(pr_);
  XSTAGE_REQUIRE(pr_.b_m == 128 && (pr_.b_n == 128 || pr_.b_n == 256),
                 "MegaMoE: the fused kernel uses 128 x 128 or 128 x 256 tiles (got " + std::to_string(pr_.b_m) + " x " + std::to_string(pr_.b_n) + ")");
  XSTAGE_REQUIRE(pr_.dtype == DType::bf16 || pr_.b_n == 256,
                 "MegaMoE fp8: needs 128 x 256 tiles, so that each Linear-1 tile owns whole 128-column activation scale blocks "
                 "(h % 256 == 0 and 2·h_inter % 256 == 0; got h = " + std::to_string(pr_.h_hidden) + ", h_inter = " +
                     std::to_string(pr_.h_inter) + ", b_n = " + std::to_string(pr_.b_n) + ")");
  XSTAGE_REQUIRE(pr_.P_ranks == rt.world_size(), "MegaMoE: the problem has P = " + std::to_string(pr_.P_ranks) + " ranks but the job has " +
                                                     std::to_string(rt.world_size()));
  XSTAGE_REQUIRE(pr_.P_ranks <= kMaxEpRanks, "MegaMoE: at most " + std::to_string(kMaxEpRanks) + " expert-parallel ranks (got " + std::to_string(pr_.P_ranks) + ")");
  XSTAGE_REQUIRE(pr_.P_ranks <= rt.lsa_size(), "MegaMoE: every rank must reach every other by NVLink loads/stores (LSA team of " +
                                                   std::to_string(rt.lsa_size()) + " < " + std::to_string(pr_.P_ranks) + " ranks)");
  XSTAGE_REQUIRE(pr_.E_local() <= kMegaMoeMaxLocalExperts && pr_.P_ranks * pr_.E_local() <= kMegaMoeMaxCounts,
                 "MegaMoE: too many local experts (" + std::to_string(pr_.E_local()) + ") for the kernel's shared-memory tables");
  XSTAGE_REQUIRE(opt_.wave_lag >= 0, "MegaMoE: the expert-wave L2 lag must be >= 0 waves (got " + std::to_string(opt_.wave_lag) + ")");

  int device = 0, sms = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  grid_ = sms;
  if (opt_.automatic) {
    const ScheduleChoice choice = choose_schedule(pr_, sms);
    opt_.schedule = choice.schedule;
    opt_.wave_lag = choice.wave_lag;
    opt_.cluster_n = choice.cluster_n;
    opt_.cluster_m = choice.cluster_m;
    schedule_reason_ = choice.reason;
  }
  const bool half_l2 = pr_.h_hidden % pr_.b_n != 0;  // validate() allows this only as b_n = 256 with h an odd multiple of 128
  {
    const bool pairs = !half_l2 && grid_ % 2 == 0 && pr_.P1_l1_n_blocks() % 2 == 0 && pr_.P2_l2_n_blocks() % 2 == 0;
    XSTAGE_REQUIRE(opt_.cluster_n >= 0 && opt_.cluster_n <= 2, "MegaMoE: --cluster is 1 or 2 CTAs (or 0: automatic), got " + std::to_string(opt_.cluster_n));
    XSTAGE_REQUIRE(opt_.cluster_n != 2 || pairs,
                   "MegaMoE: CTA pairs need an even number of Linear-1 and Linear-2 n-blocks (P1 = " + std::to_string(pr_.P1_l1_n_blocks()) +
                       ", P2 = " + std::to_string(pr_.P2_l2_n_blocks()) + (half_l2 ? ", a half-full last block" : "") + ") and SMs (" +
                       std::to_string(grid_) + ")");
    // Automatic: pairs for the interleaved schedule only. Same-run A/B over the grid (docs/MOE.md, "CTA
    // pairs"): pairs made the interleaved schedule 4-6% faster on the DeepSeek-V3-like shapes and
    // neutral elsewhere (geomean 0.995), but the waves 1-2% and the pipelined waves 2-12% slower: the two
    // CTAs of a pair run in lockstep, so each waits for the other's dependencies as well as its own.
    cluster_n_ = opt_.cluster_n > 0 ? opt_.cluster_n : (pairs && opt_.schedule == MoeScheduleKind::interleaved ? 2 : 1);
    // Mixed pairs along M (scheduler.hpp's MixedPairTiling): scheduler rows of 256; on rows with tokens in both
    // halves each CTA runs one 128-row half and the pair shares every weight k-block by multicast, on an
    // expert's last row with tokens in its first half only the pair shares A like the N-pairs. The ring stays
    // the plain buffer below (the kernel's counter targets rely on it).
    XSTAGE_REQUIRE(opt_.cluster_m == 1 || opt_.cluster_m == 2, "MegaMoE: --cluster-m is 1 or 2 CTAs, got " + std::to_string(opt_.cluster_m));
    if (opt_.cluster_m == 2) {
      XSTAGE_REQUIRE(opt_.cluster_n != 2, "MegaMoE: CTA pairs along N (--cluster 2) and along M (--cluster-m 2) do not combine");
      XSTAGE_REQUIRE(pr_.b_n == 256 && pairs,
                     "MegaMoE: M-pairs need 128 x 256 tiles, even Linear-1 and Linear-2 n-block counts (P1 = " +
                         std::to_string(pr_.P1_l1_n_blocks()) + ", P2 = " + std::to_string(pr_.P2_l2_n_blocks()) +
                         (half_l2 ? ", a half-full last block" : "") + ") and an even number of SMs");
      cluster_n_ = 1;
      cluster_m_ = 2;
      pr_.b_m = 2 * pr_.b_m;
    }
  }
  config_ = megamoe_config_id(pr_.dtype, pr_.b_n, half_l2, cluster_n_, cluster_m_);
  // The schedule heuristics count scheduler rows and instances: with M-pairs, 256-row rows over grid / 2 clusters.
  D_rows_ = opt_.D_rows > 0 ? opt_.D_rows : static_cast<int>(interleave_lead_rows(pr_, grid_ / cluster_m_));
  wave_experts_ = opt_.wave_experts > 0 ? opt_.wave_experts : wave_size_experts(pr_, grid_ / cluster_m_);
  XSTAGE_REQUIRE(wave_experts_ <= pr_.E_local(), "MegaMoE: wave size " + std::to_string(wave_experts_) + " exceeds the " + std::to_string(pr_.E_local()) + " local experts");

  const std::int64_t capacity = opt_.capacity_slack > 0 ? expected_capacity_rows(pr_, opt_.capacity_slack) : worst_case_capacity_rows(pr_);
  window_ = plan_window(pr_, capacity, static_cast<int>(capacity / pr_.b_m));  // ring = plain buffer: no slot reuse
  buffer_ = std::make_unique<comm::SymmetricBuffer>(rt_, static_cast<std::size_t>(window_.total_bytes));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(buffer_->local(), 0, window_.total_bytes, rt_.stream()));
  if constexpr (kMoeStats) {
    stats_ = DeviceBuffer(sizeof(MoeKernelStats));
    // Records per CTA: its share of every CTA tile the window's rows can hold, and some slack for uneven walks.
    const std::int64_t cta_tiles = static_cast<std::int64_t>(window_.dispatch.max_scheduler_rows()) * cluster_m_ *
                                   (pr_.P1_l1_n_blocks() + pr_.P2_l2_n_blocks());
    launch_.trace.capacity = static_cast<int>((cta_tiles + grid_ - 1) / grid_ + 16);
    trace_tiles_ = DeviceBuffer(sizeof(MoeTileRecord) * grid_ * launch_.trace.capacity);
    trace_drains_ = DeviceBuffer(sizeof(MoeDrainRecord) * grid_ * launch_.trace.capacity);
    trace_anchors_ = DeviceBuffer(sizeof(MoeCtaAnchor) * grid_);
    launch_.trace.tiles = trace_tiles_.get<MoeTileRecord>();
    launch_.trace.drains = trace_drains_.get<MoeDrainRecord>();
    launch_.trace.anchors = trace_anchors_.get<MoeCtaAnchor>();
  }

  launch_.problem = pr_;
  launch_.window = window_;
  launch_.local = static_cast<char*>(buffer_->local());
  for (int r = 0; r < pr_.P_ranks; ++r)
    launch_.peer[r] = r == rt_.rank() ? launch_.local : static_cast<char*>(buffer_->peer_pointer(r));
  launch_.rank = rt_.rank();
  launch_.grid = grid_;
  launch_.schedule = opt_.schedule;
  launch_.D_rows = D_rows_;
  launch_.wave_experts = wave_experts_;
  launch_.wave_lag = opt_.wave_lag;
  launch_.wait = state_.wait_context();
  launch_.calls = state_.epoch_view();
  launch_.stats = stats_.get<MoeKernelStats>();
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(rt_.stream()));
  rt_.barrier();  // every window is zeroed (epochs included) before any rank's first call
}

std::string FusedMoeLayer::name() const {
  return std::string(opt_.automatic ? "megamoe-auto: " : "megamoe-") + to_string(opt_.schedule) +
         (opt_.schedule == MoeScheduleKind::interleaved
              ? " D=" + std::to_string(D_rows_)
              : " W=" + std::to_string(wave_experts_) + (opt_.wave_lag > 0 ? " lag=" + std::to_string(opt_.wave_lag) : "")) +
         " 128x" + std::to_string(pr_.b_n) + (cluster_n_ > 1 ? " pairs" : "") + (cluster_m_ > 1 ? " m-pairs" : "");
}

void FusedMoeLayer::poll() const {
  if (const auto failure = state_.failure()) throw PlatformError(describe(*failure, state_.timeout_s()));
}

void FusedMoeLayer::enqueue(const MoeLayerViews& v, cudaStream_t stream) {
  XSTAGE_REQUIRE(v.tokens >= 0 && v.tokens <= pr_.T_tokens,
                 "MegaMoE: " + std::to_string(v.tokens) + " tokens, the layer was built for at most T = " + std::to_string(pr_.T_tokens));
  XSTAGE_REQUIRE((v.tokens == 0 || (v.tokens_bf16 && v.topk_ids && v.topk_weights && v.out_bf16)) && v.W1 && v.W2,
                 "MegaMoE: an operand is missing (null pointer)");
  XSTAGE_REQUIRE(pr_.dtype == DType::bf16 || (v.W1_scales && v.W2_scales), "MegaMoE fp8: the weights come without their scales");
  if (const auto failure = state_.failure())
    throw PlatformError("MegaMoE: an earlier call of this layer failed (" + describe(*failure, state_.timeout_s()) +
                        "); construct a new layer on every rank");
  char* local = launch_.local;
  const comm::WaitContext wait = state_.wait_context();
  enqueue_prologue(local, window_.epochs, rt_.rank(), pr_.P_ranks, wait, state_.epoch_view(), stream);
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(local + window_.counters.region.offset_bytes, 0, window_.counters.region.size_bytes, stream));
  if constexpr (kMoeStats) XSTAGE_CUDA_CHECK(cudaMemsetAsync(stats_.get(), 0, stats_.bytes(), stream));
  if (v.tokens > 0 && pr_.dtype == DType::fp8_e4m3)  // W8A8: each source quantizes its own tokens 1×128
    quantize_rows_fp8(static_cast<const __nv_bfloat16*>(v.tokens_bf16), pr_.h_hidden, v.tokens, pr_.h_hidden,
                      reinterpret_cast<std::uint8_t*>(local + window_.tokens.region.offset_bytes), window_.tokens.row_pitch_bytes,
                      reinterpret_cast<float*>(local + window_.tokens.scales.offset_bytes), window_.tokens.scale_blocks, 1, stream);
  else if (v.tokens > 0)
    XSTAGE_CUDA_CHECK(cudaMemcpyAsync(local + window_.tokens.region.offset_bytes, v.tokens_bf16,
                                      static_cast<std::size_t>(v.tokens) * window_.tokens.row_pitch_bytes, cudaMemcpyDeviceToDevice, stream));
  enqueue_route(v.topk_ids, v.tokens, pr_, local, window_.send, wait, stream);

  MegaMoeLaunch l = launch_;
  l.tokens = v.tokens;
  l.topk_weights = v.topk_weights;
  l.out = v.out_bf16;
  l.W1 = v.W1;
  l.W2 = v.W2;
  l.W1_scales = v.W1_scales;
  l.W2_scales = v.W2_scales;
  launch_megamoe(config_, l, stream);
}

FusedMoeLayer::TilesRun FusedMoeLayer::read_tiles_run() const {
  TilesRun t;
  XSTAGE_CUDA_CHECK(cudaMemcpy(&t.l1, launch_.local + window_.counters.l1_tiles_run(), 4, cudaMemcpyDeviceToHost));
  XSTAGE_CUDA_CHECK(cudaMemcpy(&t.l2, launch_.local + window_.counters.l2_tiles_run(), 4, cudaMemcpyDeviceToHost));
  return t;
}

std::optional<FusedMoeLayer::Trace> FusedMoeLayer::read_trace() const {
  if constexpr (!kMoeStats) return std::nullopt;
  Trace t;
  t.capacity = launch_.trace.capacity;
  t.anchors.resize(grid_);
  t.tiles.resize(static_cast<std::size_t>(grid_) * t.capacity);
  t.drains.resize(t.tiles.size());
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
