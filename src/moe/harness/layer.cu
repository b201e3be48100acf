#include "moe/harness/layer.hpp"
#include "moe/harness/weight_stream.hpp"

#include <cuda_bf16.h>

#include <cmath>

#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "moe/fp8/fp8.hpp"
#include "moe/problem/layout.hpp"
#include "moe/fp8/quantize_device.hpp"
#include "common/launch.cuh"

namespace xstage::moe {
namespace {

enum Tensor : std::uint64_t { kTokens = 1, kW1 = 2, kW2 = 3 };

// Uniform in [-1, 1) from (seed, tensor, index), exactly the same float on host and device: a 24-bit
// integer scaled by a power of two, minus one, is exact in fp32.
__host__ __device__ inline float hashed_uniform(std::uint64_t seed, std::uint64_t tensor, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + (tensor << 58) + index;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<std::uint32_t>(z >> 40)) * (1.0f / 8388608.0f) - 1.0f;
}

// The value of logical element `index` of `tensor`: uniform times `scale`, rounded to bf16.
__global__ void fill_tokens_kernel(__nv_bfloat16* x, std::uint64_t seed, std::int64_t base, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(hashed_uniform(seed, kTokens, base + i));
}

// Stored W1 row sr of local expert e holds logical row l1_logical_row(sr / b_n, sr % b_n) of global expert
// first_expert + e.
__global__ void fill_w1_kernel(__nv_bfloat16* w, std::uint64_t seed, int first_expert, int E_local, int h, int h_inter,
                               int b_n, float scale) {
  const std::int64_t rows = 2LL * h_inter, n = E_local * rows * h;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % h);
    const std::int64_t r = i / h;
    const int e = static_cast<int>(r / rows), sr = static_cast<int>(r % rows);
    const int lr = l1_logical_row(sr / b_n, sr % b_n, b_n, h_inter);
    const std::uint64_t index = (static_cast<std::uint64_t>(first_expert + e) * rows + lr) * h + c;
    w[i] = __float2bfloat16_rn(hashed_uniform(seed, kW1, index) * scale);
  }
}

__global__ void fill_w2_kernel(__nv_bfloat16* w, std::uint64_t seed, std::int64_t base, std::int64_t n, float scale) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    w[i] = __float2bfloat16_rn(hashed_uniform(seed, kW2, base + i) * scale);
}

float w1_scale(const MoeProblem& pr) { return 1.0f / std::sqrt(static_cast<float>(pr.h_hidden)); }
float w2_scale(const MoeProblem& pr) { return 1.0f / std::sqrt(static_cast<float>(pr.h_inter)); }

// Grid-stride fills: a few blocks per SM.
int fill_blocks() { return current_device_facts().sm_count * 8; }
constexpr int kFillThreads = 256;

// Rank `rank`'s experts' bf16 weights: W1 [E_local][2·h_inter][h] in stored (tile-interleaved) order, W2
// [E_local][h][h_inter].
void fill_weights(const MoeProblem& pr, int rank, std::uint64_t seed, DeviceBuffer& W1, DeviceBuffer& W2,
                  cudaStream_t stream) {
  const std::int64_t h = pr.h_hidden, I = pr.h_inter, EL = pr.E_local();
  launch_kernel(fill_w1_kernel, fill_blocks(), kFillThreads, 0, stream, W1.get<__nv_bfloat16>(), seed, pr.global_expert(rank, 0),
                                                          pr.E_local(), pr.h_hidden, pr.h_inter, pr.b_n, w1_scale(pr));
  launch_kernel(fill_w2_kernel, fill_blocks(), kFillThreads, 0, stream, W2.get<__nv_bfloat16>(), seed, pr.global_expert(rank, 0) * h * I,
                                                          EL * h * I, w2_scale(pr));
}

}  // namespace

LayerInputs make_layer_inputs(const MoeProblem& pr, int rank, const LayerData& data, cudaStream_t stream) {
  validate(pr);
  XSTAGE_REQUIRE(static_cast<int>(data.topk.size()) == pr.P_ranks, "layer inputs: routing for every rank is needed");
  const RankTopK& tk = data.topk[rank];
  const std::int64_t T = pr.T_tokens, h = pr.h_hidden, I = pr.h_inter, k = pr.top_k, EL = pr.E_local();
  LayerInputs in;
  in.problem = pr;
  in.rank = rank;
  in.tokens = tk.tokens;
  in.tokens_bf16 = DeviceBuffer(T * h * 2);
  in.topk_ids = DeviceBuffer(T * k * 4);
  in.topk_weights = DeviceBuffer(T * k * 4);
  launch_kernel(fill_tokens_kernel, fill_blocks(), kFillThreads, 0, stream, in.tokens_bf16.get<__nv_bfloat16>(), data.seed,
                                                              rank * T * h, T * h);
  const ExpertWeightBytes wb = expert_weight_bytes(pr);
  in.W1 = DeviceBuffer(wb.W1);
  in.W2 = DeviceBuffer(wb.W2);
  in.W1_scales = DeviceBuffer(wb.W1_scales);
  in.W2_scales = DeviceBuffer(wb.W2_scales);
  if (pr.dtype == DType::bf16) {
    fill_weights(pr, rank, data.seed, in.W1, in.W2, stream);
  } else {
    // W8A8: the same bf16 weights, quantized 128×128. Each expert's W1 ([2·h_inter][h], stored order) and W2
    // ([h][h_inter]) has a multiple of 128 rows, so no block straddles two experts and the stacked experts
    // quantize as one matrix: exactly the per-expert blocks reference_moe_layer quantizes.
    DeviceBuffer w1_bf16(EL * 2 * I * h * 2), w2_bf16(EL * h * I * 2);
    fill_weights(pr, rank, data.seed, w1_bf16, w2_bf16, stream);
    quantize_weights_fp8(w1_bf16.get<__nv_bfloat16>(), static_cast<int>(EL * 2 * I), pr.h_hidden, in.W1.get<std::uint8_t>(),
                         in.W1_scales.get<float>(), stream);
    quantize_weights_fp8(w2_bf16.get<__nv_bfloat16>(), static_cast<int>(EL * h), pr.h_inter, in.W2.get<std::uint8_t>(),
                         in.W2_scales.get<float>(), stream);
    XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));  // before the bf16 temporaries are freed
  }
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(in.topk_ids.get(), 0, in.topk_ids.bytes(), stream));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(in.topk_weights.get(), 0, in.topk_weights.bytes(), stream));
  if (tk.tokens > 0) {
    XSTAGE_CUDA_CHECK(cudaMemcpyAsync(in.topk_ids.get(), tk.ids.data(), tk.ids.size() * 4, cudaMemcpyHostToDevice, stream));
    XSTAGE_CUDA_CHECK(
        cudaMemcpyAsync(in.topk_weights.get(), tk.weights.data(), tk.weights.size() * 4, cudaMemcpyHostToDevice, stream));
  }
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors are pageable and may go away
  return in;
}

LayerOutput make_layer_output(const MoeProblem& pr) {
  LayerOutput out;
  out.out_bf16 = DeviceBuffer(static_cast<std::size_t>(pr.T_tokens) * pr.h_hidden * 2);
  return out;
}

void poison_output(LayerOutput& out, cudaStream_t stream) {
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(out.out_bf16.get(), 0xFF, out.out_bf16.bytes(), stream));
}

MoeLayerViews LayerInputs::views(LayerOutput& out) const {
  MoeLayerViews v;
  v.tokens = tokens;
  v.tokens_bf16 = tokens_bf16.get();
  v.topk_ids = topk_ids.get<std::int32_t>();
  v.topk_weights = topk_weights.get<float>();
  v.W1 = W1.get();
  v.W2 = W2.get();
  v.W1_scales = W1_scales.bytes() ? W1_scales.get<float>() : nullptr;
  v.W2_scales = W2_scales.bytes() ? W2_scales.get<float>() : nullptr;
  v.out_bf16 = out.out_bf16.get();
  return v;
}

std::int64_t peer_bytes_per_call(const MoeProblem& pr, const LayerData& data, int rank) {
  // Rows rank pulls from other sources for its experts, plus rows its tokens send to other owners (their
  // outputs come back): each row is h elements in (dispatch), h bf16 out (combine).
  const std::int64_t in_row = static_cast<std::int64_t>(pr.h_hidden) * pr.elem_bytes() +
                              (pr.dtype == DType::fp8_e4m3 ? 4LL * (pr.h_hidden / fp8::kBlock) : 0);
  const std::int64_t out_row = static_cast<std::int64_t>(pr.h_hidden) * pr.out_bytes;
  std::int64_t pulled = 0, sent_back = 0;
  for (int s = 0; s < pr.P_ranks; ++s) {
    const RankTopK& tk = data.topk[s];
    for (int i = 0; i < tk.tokens * pr.top_k; ++i) {
      const int owner = tk.ids[i] / pr.E_local();
      if (owner == rank && s != rank) ++pulled;
      if (s == rank && owner != rank) ++sent_back;
    }
  }
  return pulled * in_row + sent_back * out_row;
}

MoeInputs make_reference_inputs(const MoeProblem& pr, const LayerData& data) {
  validate(pr);
  const std::int64_t T = pr.T_tokens, h = pr.h_hidden, I = pr.h_inter, E = pr.E_experts;
  MoeInputs in;
  in.topk = data.topk;
  in.tokens.resize(pr.P_ranks);
  for (int r = 0; r < pr.P_ranks; ++r) {
    auto& x = in.tokens[r];
    x.resize(static_cast<std::size_t>(data.topk[r].tokens) * h);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = round_to_bf16(hashed_uniform(data.seed, kTokens, r * T * h + i));
  }
  in.weights.W1.resize(static_cast<std::size_t>(E * 2 * I * h));
  in.weights.W2.resize(static_cast<std::size_t>(E * h * I));
  const float s1 = w1_scale(pr), s2 = w2_scale(pr);
  for (std::size_t i = 0; i < in.weights.W1.size(); ++i) in.weights.W1[i] = round_to_bf16(hashed_uniform(data.seed, kW1, i) * s1);
  for (std::size_t i = 0; i < in.weights.W2.size(); ++i) in.weights.W2[i] = round_to_bf16(hashed_uniform(data.seed, kW2, i) * s2);
  return in;
}

}  // namespace xstage::moe
