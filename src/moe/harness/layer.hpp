// The MoE layer as a GPU operation, whatever implements it: one rank's device inputs and output, their
// deterministic generation from a seed, and the interface the unfused baseline (unfused.hpp) and the fused
// MegaMoE kernel both satisfy, so `xstage moe check` and `xstage moe bench` run either unchanged.
//
// Layouts (docs/MOE.md), all row-major:
//   tokens       [T][h]                  bf16   this rank's tokens (T_s <= T rows used)
//   topk_ids     [T][k]                  int32  global expert ids (router output)
//   topk_weights [T][k]                  fp32
//   W1           [E_local][2·h_inter][h] bf16   tile-interleaved rows: stored row n·b_n + c is logical row
//                                               l1_logical_row(n, c, b_n, h_inter) (gate rows [0, h_inter),
//                                               up rows [h_inter, 2·h_inter)), so every b_n-column block of
//                                               the Linear-1 output holds b_n/2 gate and the matching b_n/2 up columns
//   W2           [E_local][h][h_inter]   bf16
//   out          [T][h]                  bf16
// For fp8_e4m3 problems (W8A8, docs/MOE.md "fp8 W8A8") W1 / W2 hold e4m3 codes in the same stored row order,
// quantized 128×128 from the bf16 weights above, with fp32 scales in quantize.hpp's weight-scale layout,
// experts stacked (expert e's W1 block-row b is scale row e·(2·h_inter/128) + b):
//   W1_scales    [E_local·2·h_inter/128][round_up(h/128, 4)]        fp32
//   W2_scales    [E_local·h/128][round_up(h_inter/128, 4)]          fp32
// Tokens stay bf16 for every dtype: each implementation quantizes them 1×128 inside its forward
// (quantize_device.hpp), which is part of the layer's time, as in real fp8 MoE dispatch.
// Values come from a counter-based hash of (seed, tensor, logical index), so any rank (and the CPU
// reference) can regenerate any expert's weights and any rank's tokens without communication.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_buffer.hpp"
#include "moe/problem/problem.hpp"
#include "moe/reference/reference.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

using DeviceBuffer = xstage::DeviceBuffer;

struct LayerOutput;

// One call's operands as views of the caller's device memory (nothing owned): what every implementation's
// enqueue() takes, from the CLI harness (LayerInputs::views) or a framework's tensors alike.
struct MoeLayerViews {
  int tokens = 0;                          // T_s <= T rows of tokens / topk used this call
  const void* tokens_bf16 = nullptr;       // [T_s][h] bf16 (quantized 1×128 inside the call for fp8)
  const std::int32_t* topk_ids = nullptr;  // [T_s][k] global expert ids
  const float* topk_weights = nullptr;     // [T_s][k]
  const void* W1 = nullptr;                // [E_local][2·h_inter][h], packed (weights.hpp), bf16 or e4m3 codes
  const void* W2 = nullptr;                // [E_local][h][h_inter]
  const float* W1_scales = nullptr;        // fp8 only (weights.hpp's scale layout)
  const float* W2_scales = nullptr;
  void* out_bf16 = nullptr;                // [T_s][h] bf16
};

// The harness's own inputs (owning, generated from a seed).
struct LayerInputs {
  MoeProblem problem;
  int rank = 0;
  int tokens = 0;  // T_s, rows of tokens / topk used this call
  DeviceBuffer tokens_bf16, topk_ids, topk_weights, W1, W2;
  // fp8_e4m3 problems: W1 / W2 hold e4m3 codes (same stored row order as bf16), and
  // W1_scales [E_local·2·h_inter/128][round_up(h/128, 4)], W2_scales [E_local·h/128][round_up(h_inter/128, 4)] fp32
  // (quantize.hpp's weight-scale layout, experts stacked: expert e's W1 block-row b is row e·(2·h_inter/128) + b).
  DeviceBuffer W1_scales, W2_scales;

  MoeLayerViews views(LayerOutput& out) const;
};

struct LayerOutput {
  DeviceBuffer out_bf16;  // [T][h]
};

// Which values a layer gets: the seed of tokens and weights and the routing of every rank.
struct LayerData {
  std::uint64_t seed = 0;
  std::vector<RankTopK> topk;  // [P], from balanced_routing / skewed_routing (every rank builds all of them)
};

// Allocates and fills rank `rank`'s inputs on `stream` (synchronised before return).
LayerInputs make_layer_inputs(const MoeProblem& problem, int rank, const LayerData& data, cudaStream_t stream);
LayerOutput make_layer_output(const MoeProblem& problem);
// Fills the output with NaN (bf16 0xFFFF) so that rows an implementation forgets to write show up.
void poison_output(LayerOutput& out, cudaStream_t stream);

// The same tokens and all E experts' weights on the host, in the reference's logical layout.
MoeInputs make_reference_inputs(const MoeProblem& problem, const LayerData& data);

// What every implementation of the layer provides: the op interface of docs/ARCHITECTURE.md.
//   enqueue()  the whole layer on `stream`, operands as views. The fused layer never synchronises the host
//              (so a framework can overlap it, and CUDA graphs can capture it); the unfused baseline reads
//              the exchanged counts on the host, as its users' layers do, and says so.
//   poll()     non-blocking: throws the first device-side failure of any earlier call (a wait that timed
//              out, bad router input), else nothing. After a stream synchronisation it covers every call
//              up to it.
class MoeLayerImpl {
 public:
  virtual ~MoeLayerImpl() = default;
  virtual void enqueue(const MoeLayerViews& views, cudaStream_t stream) = 0;
  virtual void poll() const {}
  virtual std::string name() const = 0;
};

// Bytes this rank's layer moves over NVLink per call (rows pulled from other ranks for dispatch, and the
// same rows' outputs stored back for the combine), from the routing: the same for every implementation.
std::int64_t peer_bytes_per_call(const MoeProblem& problem, const LayerData& data, int rank);

}  // namespace xstage::moe
