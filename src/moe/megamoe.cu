#include "moe/megamoe.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "common/cuda_check.hpp"
#include "common/error.hpp"
#include "moe/megamoe_kernel.cuh"
#include "moe/quantize_device.hpp"
#include "moe/schedule_host.hpp"

namespace xstage::moe {
namespace {

// Waits (bounded) until every peer has finished reading this rank's data of call `epoch - 1`.
__global__ void prologue_kernel(char* local, EpochFlags flags, int rank, int P, std::uint32_t epoch, WaitContext ctx) {
  const int peer = threadIdx.x;
  if (peer < P && peer != rank)
    wait_counter<true>(ctx, reinterpret_cast<const std::uint32_t*>(local + flags.peer_finished(peer)), epoch - 1,
                       MoeWait::peer_finished, peer);
}

// Block e lists this rank's pairs t·k + j with ids[t][j] == e in token order (a stable compaction: ballots
// within a warp, warp totals across the block), and stores their count.
constexpr int kRouteThreads = 256;
__global__ void __launch_bounds__(kRouteThreads) route_kernel(const std::int32_t* ids, int tokens, int k, char* local, SendLists send) {
  __shared__ int warp_total[kRouteThreads / 32];
  const int e = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int* list = reinterpret_cast<int*>(local + send.pair_offset(e, 0));
  int base = 0;
  for (int t0 = 0; t0 < tokens; t0 += kRouteThreads) {
    const int t = t0 + threadIdx.x;
    int hit = -1;
    if (t < tokens)
      for (int j = 0; j < k; ++j)
        if (ids[static_cast<std::int64_t>(t) * k + j] == e) hit = j;
    const unsigned mask = __ballot_sync(0xffffffffu, hit >= 0);
    if (lane == 0) warp_total[warp] = __popc(mask);
    __syncthreads();
    int before = base, total = 0;
    for (int q = 0; q < kRouteThreads / 32; ++q) {
      if (q < warp) before += warp_total[q];
      total += warp_total[q];
    }
    if (hit >= 0) list[before + __popc(mask & ((1u << lane) - 1u))] = t * k + hit;
    base += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) *reinterpret_cast<int*>(local + send.count_offset(e)) = base;
}

// A TMA copy of a row-major [rows][K] operand, split over `Multicast` CTAs (each loads its share of the box).
template <class Element, class Tma, class SmemLayout, class TileShape, class Op = cute::SM90_TMA_LOAD, int Multicast = 1>
Tma make_tma(const void* base, std::int64_t rows, int K) {
  using namespace cute;
  auto tensor = make_tensor(make_gmem_ptr(static_cast<Element const*>(base)),
                            make_shape(static_cast<int32_t>(rows), static_cast<int32_t>(K)),
                            make_stride(static_cast<int64_t>(K), _1{}));
  return make_tma_copy(Op{}, tensor, take<0, 2>(SmemLayout{}), TileShape{}, Int<Multicast>{});
}

template <class C>
void set_smem_attributes() {
  const int bytes = static_cast<int>(sizeof(MegaMoeSharedStorage<C>));
  XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(&megamoe_kernel<ExpertWaveSchedule, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(&megamoe_kernel<InterleavedSchedule, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

}  // namespace

template <class F>
void FusedMoeLayer::with_config(F&& f) const {
  if (pr_.dtype == DType::fp8_e4m3 && cluster_m_ == 2) f(std::type_identity<MegaMoeFp8Config<false, 1, 2>>{});
  else if (pr_.dtype == DType::fp8_e4m3 && half_l2_) f(std::type_identity<MegaMoeFp8Config<true>>{});
  else if (pr_.dtype == DType::fp8_e4m3 && cluster_n_ == 2) f(std::type_identity<MegaMoeFp8Config<false, 2>>{});
  else if (pr_.dtype == DType::fp8_e4m3) f(std::type_identity<MegaMoeFp8Config<false>>{});
  else if (pr_.b_n == 256 && cluster_m_ == 2) f(std::type_identity<MegaMoeConfig<256, cute::bfloat16_t, false, 1, 2>>{});
  else if (pr_.b_n == 256 && half_l2_) f(std::type_identity<MegaMoeConfig<256, cute::bfloat16_t, true>>{});
  else if (pr_.b_n == 256 && cluster_n_ == 2) f(std::type_identity<MegaMoeConfig<256, cute::bfloat16_t, false, 2>>{});
  else if (pr_.b_n == 256) f(std::type_identity<MegaMoeConfig<256>>{});
  else if (cluster_n_ == 2) f(std::type_identity<MegaMoeConfig<128, cute::bfloat16_t, false, 2>>{});
  else f(std::type_identity<MegaMoeConfig<128>>{});
}

const char* to_string(MoeScheduleKind kind) { return kind == MoeScheduleKind::expert_wave ? "expert-wave" : "interleaved"; }

FusedMoeLayer::FusedMoeLayer(const MoeProblem& pr, comm::Runtime& rt, const FusedMoeOptions& opt) : pr_(pr), rt_(rt), opt_(opt) {
  validate(pr_);
  require_input(pr_.b_m == 128 && (pr_.b_n == 128 || pr_.b_n == 256),
                "MegaMoE: the fused kernel uses 128 x 128 or 128 x 256 tiles (got " + std::to_string(pr_.b_m) + " x " + std::to_string(pr_.b_n) + ")");
  require_input(pr_.dtype == DType::bf16 || pr_.b_n == 256,
                "MegaMoE fp8: needs 128 x 256 tiles, so that each Linear-1 tile owns whole 128-column activation scale blocks "
                "(h % 256 == 0 and 2·h_inter % 256 == 0; got h = " + std::to_string(pr_.h_hidden) + ", h_inter = " +
                    std::to_string(pr_.h_inter) + ", b_n = " + std::to_string(pr_.b_n) + ")");
  require_input(pr_.P_ranks == rt.world_size(), "MegaMoE: the problem has P = " + std::to_string(pr_.P_ranks) + " ranks but the job has " +
                                                    std::to_string(rt.world_size()));
  require_input(pr_.P_ranks <= kMaxEpRanks, "MegaMoE: at most " + std::to_string(kMaxEpRanks) + " expert-parallel ranks (got " + std::to_string(pr_.P_ranks) + ")");
  require_input(pr_.P_ranks <= rt.lsa_size(), "MegaMoE: every rank must reach every other by NVLink loads/stores (LSA team of " +
                                                  std::to_string(rt.lsa_size()) + " < " + std::to_string(pr_.P_ranks) + " ranks)");
  require_input(pr_.E_local() <= MegaMoeConfig<128>::kMaxLocalExperts && pr_.P_ranks * pr_.E_local() <= MegaMoeConfig<128>::kMaxCounts,
                "MegaMoE: too many local experts (" + std::to_string(pr_.E_local()) + ") for the kernel's shared-memory tables");
  require_input(opt_.timeout_s > 0 && std::isfinite(opt_.timeout_s), "MegaMoE: the device timeout must be positive");
  require_input(opt_.wave_lag >= 0, "MegaMoE: the expert-wave L2 lag must be >= 0 waves (got " + std::to_string(opt_.wave_lag) + ")");

  int device = 0, sms = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  grid_ = sms;
  half_l2_ = pr_.h_hidden % pr_.b_n != 0;  // validate() allows this only as b_n = 256 with h an odd multiple of 128
  {
    const bool pairs = !half_l2_ && grid_ % 2 == 0 && pr_.P1_l1_n_blocks() % 2 == 0 && pr_.P2_l2_n_blocks() % 2 == 0;
    require_input(opt_.cluster_n >= 0 && opt_.cluster_n <= 2, "MegaMoE: --cluster is 1 or 2 CTAs (or 0: automatic), got " + std::to_string(opt_.cluster_n));
    require_input(opt_.cluster_n != 2 || pairs,
                  "MegaMoE: CTA pairs need an even number of Linear-1 and Linear-2 n-blocks (P1 = " + std::to_string(pr_.P1_l1_n_blocks()) +
                      ", P2 = " + std::to_string(pr_.P2_l2_n_blocks()) + (half_l2_ ? ", a half-full last block" : "") + ") and SMs (" +
                      std::to_string(grid_) + ")");
    // Automatic: pairs for the interleaved schedule only. Same-run A/B over the grid (results/h200x2/moe/
    // run24-pairs): pairs made the interleaved schedule 4-6% faster on the DeepSeek-V3-like shapes and
    // neutral elsewhere (geomean 0.995), but the waves 1-2% and the pipelined waves 2-12% slower: the two
    // CTAs of a pair run in lockstep, so each waits for the other's dependencies as well as its own.
    cluster_n_ = opt_.cluster_n > 0 ? opt_.cluster_n : (pairs && opt_.schedule == MoeScheduleKind::interleaved ? 2 : 1);
    // Mixed pairs along M (scheduler.hpp's MixedPairTiling): scheduler rows of 256; on rows with tokens in both
    // halves each CTA runs one 128-row half and the pair shares every weight k-block by multicast, on an
    // expert's last row with tokens in its first half only the pair shares A like the N-pairs. The ring stays
    // the plain buffer below (the kernel's counter targets rely on it).
    require_input(opt_.cluster_m == 1 || opt_.cluster_m == 2, "MegaMoE: --cluster-m is 1 or 2 CTAs, got " + std::to_string(opt_.cluster_m));
    if (opt_.cluster_m == 2) {
      require_input(opt_.cluster_n != 2, "MegaMoE: CTA pairs along N (--cluster 2) and along M (--cluster-m 2) do not combine");
      require_input(pr_.b_n == 256 && pairs,
                    "MegaMoE: M-pairs need 128 x 256 tiles, even Linear-1 and Linear-2 n-block counts (P1 = " +
                        std::to_string(pr_.P1_l1_n_blocks()) + ", P2 = " + std::to_string(pr_.P2_l2_n_blocks()) +
                        (half_l2_ ? ", a half-full last block" : "") + ") and an even number of SMs");
      cluster_n_ = 1;
      cluster_m_ = 2;
      pr_.b_m = 2 * pr_.b_m;
    }
  }
  // The schedule heuristics count scheduler rows and instances: with M-pairs, 256-row rows over grid / 2 clusters.
  D_rows_ = opt_.D_rows > 0 ? opt_.D_rows : static_cast<int>(interleave_lead_rows(pr_, grid_ / cluster_m_));
  wave_experts_ = opt_.wave_experts > 0 ? opt_.wave_experts : wave_size_experts(pr_, grid_ / cluster_m_);
  require_input(wave_experts_ <= pr_.E_local(), "MegaMoE: wave size " + std::to_string(wave_experts_) + " exceeds the " + std::to_string(pr_.E_local()) + " local experts");

  const std::int64_t capacity = opt_.capacity_slack > 0 ? expected_capacity_rows(pr_, opt_.capacity_slack) : worst_case_capacity_rows(pr_);
  window_ = plan_window(pr_, capacity, static_cast<int>(capacity / pr_.b_m));  // ring = plain buffer: no slot reuse
  buffer_ = std::make_unique<comm::SymmetricBuffer>(rt_, static_cast<std::size_t>(window_.total_bytes));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(buffer_->local(), 0, window_.total_bytes, rt_.stream()));
  for (int r = 0; r < pr_.P_ranks; ++r)
    peer_[r] = r == rt_.rank() ? static_cast<char*>(buffer_->local()) : static_cast<char*>(buffer_->peer_pointer(r));
  XSTAGE_CUDA_CHECK(cudaHostAlloc(&status_, sizeof(MoeDeviceStatus), cudaHostAllocMapped));
  *status_ = MoeDeviceStatus{};
  XSTAGE_CUDA_CHECK(cudaMalloc(&stats_, sizeof(MoeKernelStats)));
  XSTAGE_CUDA_CHECK(cudaMalloc(&aborted_, sizeof(std::uint32_t)));

  with_config([](auto config) { set_smem_attributes<typename decltype(config)::type>(); });
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(rt_.stream()));
  rt_.barrier();  // every window is zeroed (epochs included) before any rank's first call
}

FusedMoeLayer::~FusedMoeLayer() {
  if (status_) cudaFreeHost(status_);
  if (stats_) cudaFree(stats_);
  if (aborted_) cudaFree(aborted_);
}

std::string FusedMoeLayer::name() const {
  return std::string("megamoe-") + to_string(opt_.schedule) +
         (opt_.schedule == MoeScheduleKind::interleaved
              ? " D=" + std::to_string(D_rows_)
              : " W=" + std::to_string(wave_experts_) + (opt_.wave_lag > 0 ? " lag=" + std::to_string(opt_.wave_lag) : "")) +
         " 128x" + std::to_string(pr_.b_n) + (cluster_n_ > 1 ? " pairs" : "") + (cluster_m_ > 1 ? " m-pairs" : "");
}

void FusedMoeLayer::forward(const LayerInputs& in, LayerOutput& out, cudaStream_t stream) {
  require_input(in.problem.P_ranks == pr_.P_ranks && in.problem.E_experts == pr_.E_experts && in.problem.top_k == pr_.top_k &&
                    in.problem.h_hidden == pr_.h_hidden && in.problem.h_inter == pr_.h_inter && in.problem.T_tokens <= pr_.T_tokens,
                "MegaMoE: the inputs' problem differs from the layer's (" + xstage::moe::describe(in.problem) + " vs " +
                    xstage::moe::describe(pr_) + ")");
  require_input(in.tokens >= 0 && in.tokens <= pr_.T_tokens, "MegaMoE: " + std::to_string(in.tokens) + " tokens exceed T = " + std::to_string(pr_.T_tokens));
  if (!failure_.empty())
    throw PlatformError("MegaMoE: an earlier call of this layer failed (" + failure_ +
                        "); the ranks' call epochs no longer agree, so construct a new layer on every rank");
  const std::uint32_t epoch = ++epoch_;
  char* local = static_cast<char*>(buffer_->local());
  const WaitContext ctx{status_, aborted_, static_cast<std::uint64_t>(opt_.timeout_s * 1e9), rt_.rank(), epoch};

  XSTAGE_CUDA_CHECK(cudaMemsetAsync(aborted_, 0, sizeof(std::uint32_t), stream));
  prologue_kernel<<<1, kMaxEpRanks, 0, stream>>>(local, window_.epochs, rt_.rank(), pr_.P_ranks, epoch, ctx);
  XSTAGE_CUDA_CHECK_LAUNCH();
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(local + window_.counters.region.offset_bytes, 0, window_.counters.region.size_bytes, stream));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(stats_, 0, sizeof(MoeKernelStats), stream));
  if (in.tokens > 0 && pr_.dtype == DType::fp8_e4m3)  // W8A8: each source quantizes its own tokens 1×128
    quantize_rows_fp8(in.tokens_bf16.get<__nv_bfloat16>(), pr_.h_hidden, in.tokens, pr_.h_hidden,
                      reinterpret_cast<std::uint8_t*>(local + window_.tokens.region.offset_bytes), window_.tokens.row_pitch_bytes,
                      reinterpret_cast<float*>(local + window_.tokens.scales.offset_bytes), window_.tokens.scale_blocks, 1, stream);
  else if (in.tokens > 0)
    XSTAGE_CUDA_CHECK(cudaMemcpyAsync(local + window_.tokens.region.offset_bytes, in.tokens_bf16.get(),
                                      static_cast<std::size_t>(in.tokens) * window_.tokens.row_pitch_bytes, cudaMemcpyDeviceToDevice, stream));
  route_kernel<<<pr_.E_experts, kRouteThreads, 0, stream>>>(in.topk_ids.get<std::int32_t>(), in.tokens, pr_.top_k, local, window_.send);
  XSTAGE_CUDA_CHECK_LAUNCH();

  with_config([&](auto config) { launch<typename decltype(config)::type>(in, out, stream, epoch, ctx); });
}

template <class C>
void FusedMoeLayer::launch(const LayerInputs& in, LayerOutput& out, cudaStream_t stream, std::uint32_t epoch,
                           const WaitContext& ctx) {
  char* local = static_cast<char*>(buffer_->local());
  MegaMoeParams<C> prm;
  prm.pr = pr_;
  prm.win = window_;
  prm.local = local;
  for (int r = 0; r < pr_.P_ranks; ++r) prm.peer[r] = peer_[r];
  prm.rank = rt_.rank();
  prm.tokens = in.tokens;
  prm.epoch = epoch;
  prm.D_rows = D_rows_;
  prm.wave_experts = wave_experts_;
  prm.wave_lag = opt_.wave_lag;
  prm.topk_weights = in.topk_weights.get<float>();
  prm.out = out.out_bf16.get<__nv_bfloat16>();
  prm.wait = ctx;
  prm.stats = stats_;
  const int EL = pr_.E_local(), h = pr_.h_hidden, I = pr_.h_inter;
  using TmaA = typename C::TmaLoadA;
  using TmaB = typename C::TmaLoadB;
  using LayoutA = typename C::SmemLayoutA;
  using LayoutB = typename C::SmemLayoutB;
  using E = typename C::Element;
  using OpA = typename C::TmaOpA;
  constexpr int kMc = C::kClusterSize;
  prm.tma_a1 = make_tma<E, TmaA, LayoutA, typename C::TileShapeA, OpA, kMc>(local + window_.dispatch.region.offset_bytes, window_.dispatch.capacity_rows, h);
  using OpB = typename C::TmaOpB;
  constexpr int kMcB = C::kClusterM;
  prm.tma_b1 = make_tma<E, TmaB, LayoutB, typename C::TileShapeB, OpB, kMcB>(in.W1.get(), static_cast<std::int64_t>(EL) * 2 * I, h);
  prm.tma_a2 = make_tma<E, TmaA, LayoutA, typename C::TileShapeA, OpA, kMc>(local + window_.ring.region.offset_bytes,
                                                                  static_cast<std::int64_t>(window_.ring.slots) * pr_.b_m, I);
  if constexpr (C::kHalfL2) {  // W2 [E_local][h][h_inter], the expert as the third mode (zero fill past h)
    using namespace cute;
    auto w2 = make_tensor(make_gmem_ptr(in.W2.get<E>()), make_shape(int32_t(h), int32_t(I), int32_t(EL)),
                          make_stride(int64_t(I), _1{}, int64_t(h) * I));
    prm.tma_b2 = make_tma_copy(SM90_TMA_LOAD{}, w2, take<0, 2>(LayoutB{}), typename C::TileShapeB{}, _1{});
  } else {
    prm.tma_b2 = make_tma<E, TmaB, LayoutB, typename C::TileShapeB, OpB, kMcB>(in.W2.get(), static_cast<std::int64_t>(EL) * h, I);
  }
  if constexpr (C::kClusterM == 2) {  // mixed pairs: the undivided descriptors as well
    using AW = typename C::TmaLoadAWhole;
    using BW = typename C::TmaLoadBWhole;
    prm.tma_a1_whole = make_tma<E, AW, LayoutA, typename C::TileShapeA>(local + window_.dispatch.region.offset_bytes, window_.dispatch.capacity_rows, h);
    prm.tma_a2_whole = make_tma<E, AW, LayoutA, typename C::TileShapeA>(local + window_.ring.region.offset_bytes,
                                                                       static_cast<std::int64_t>(window_.ring.slots) * pr_.b_m, I);
    prm.tma_b1_whole = make_tma<E, BW, LayoutB, typename C::TileShapeB>(in.W1.get(), static_cast<std::int64_t>(EL) * 2 * I, h);
    prm.tma_b2_whole = make_tma<E, BW, LayoutB, typename C::TileShapeB>(in.W2.get(), static_cast<std::int64_t>(EL) * h, I);
  }
  if constexpr (C::kFp8) {
    // quantize.hpp's weight-scale layout, local experts stacked (layer.hpp): pitch round_up(K/128, 4).
    require_input(in.W1_scales.bytes() > 0 && in.W2_scales.bytes() > 0, "MegaMoE fp8: the inputs carry no weight scales");
    prm.w1_scales = in.W1_scales.get<float>();
    prm.w2_scales = in.W2_scales.get<float>();
    prm.w1_scale_pitch = static_cast<int>(round_up(h / kScaleBlock, 4));
    prm.w2_scale_pitch = static_cast<int>(round_up(I / kScaleBlock, 4));
  }

  // Cooperative launch: every CTA must be resident at once (they wait on each other's counters); the
  // launch fails with a clear error instead of hanging if they cannot be. CTA pairs as 2 × 1 × 1 clusters.
  void* args[] = {&prm};
  const void* kernel = opt_.schedule == MoeScheduleKind::interleaved
                           ? reinterpret_cast<const void*>(&megamoe_kernel<InterleavedSchedule, C>)
                           : reinterpret_cast<const void*>(&megamoe_kernel<ExpertWaveSchedule, C>);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid_);
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = sizeof(MegaMoeSharedStorage<C>);
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeCooperative;
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = C::kClusterSize;
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = 1;
  config.attrs = attrs;
  config.numAttrs = C::kClusterSize > 1 ? 2 : 1;
  XSTAGE_CUDA_CHECK(cudaLaunchKernelExC(&config, kernel, args));
}

void FusedMoeLayer::finish(cudaStream_t stream) {
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (status_->failed) {
    failure_ = describe(*status_, opt_.timeout_s);
    throw PlatformError(failure_);
  }
  XSTAGE_CUDA_CHECK(err);
  XSTAGE_CUDA_CHECK(cudaMemcpy(&last_stats_, stats_, sizeof last_stats_, cudaMemcpyDeviceToHost));
  last_peer_bytes_ = static_cast<std::int64_t>(last_stats_.peer_bytes);
}

}  // namespace xstage::moe
