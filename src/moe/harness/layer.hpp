// The check and bench harness around the MoE layer's op interface (moe/layer.hpp): one rank's device inputs
// and output, generated deterministically from a seed, in the layouts moe/layer.hpp gives. Values come from a
// counter-based hash of (seed, tensor, logical index), so any rank (and the CPU reference) can regenerate any
// expert's weights and any rank's tokens without communication.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_buffer.hpp"
#include "moe/layer.hpp"
#include "moe/problem/problem.hpp"
#include "moe/reference/reference.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

using DeviceBuffer = xstage::DeviceBuffer;

struct LayerOutput;

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

// Bytes this rank's layer moves over NVLink per call (rows pulled from other ranks for dispatch, and the
// same rows' outputs stored back for the combine), from the routing: the same for every implementation.
std::int64_t peer_bytes_per_call(const MoeProblem& problem, const LayerData& data, int rank);

}  // namespace xstage::moe
