// The CPU reference of one whole MegaMoE layer, all ranks at once, float64 accumulation. Small shapes
// only (tests and the kernel's GPU checks compare against it).
//
// It runs the same data path as the kernel, through the same index math: dispatch rows placed by
// build_routing (expert-major, padded to b_m), Linear-1 per expert over its rows, SwiGLU
// act = silu(gate)·up with gate = Linear-1 outputs [0, h_inter) and up = [h_inter, 2·h_inter), Linear-2,
// each row stored into its source rank's combine buffer [T][k][h], then out[t] = Σ_j w[t][j]·combine[t][j].
// With StorageRounding::bf16 the values the kernel stores in bf16 (the L1 output ring and the combine rows)
// are rounded to bf16 (round to nearest even) at the same points; tokens and weights are used as given
// (feed bf16-representable values).
//
// problem.dtype == DType::fp8_e4m3 computes the W8A8 layer instead (docs/MOE.md "fp8 W8A8", fp8.hpp,
// quantize.hpp): tokens quantized per (token, 128 columns) on their source rank, W1 (in its stored
// tile-interleaved row order) and W2 per 128×128 block, each GEMM's 128-wide K blocks accumulated exactly and
// promoted with fp32(scale_a · scale_w), SwiGLU in fp32 and quantized per (row, 128 columns) again before
// Linear-2. `rounding` then only decides whether the combine rows are stored in bf16 (the kernel: yes).
#pragma once

#include <vector>

#include "moe/problem/problem.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

// All E experts in logical (untiled) row-major layout.
struct ExpertWeights {
  std::vector<float> W1;  // [E][2·h_inter][h]: Linear-1 output n from row n (gate rows, then up rows)
  std::vector<float> W2;  // [E][h][h_inter]
};

struct MoeInputs {
  std::vector<std::vector<float>> tokens;  // [P][T_s·h]
  std::vector<RankTopK> topk;              // [P], T_s tokens each
  ExpertWeights weights;
};

enum class StorageRounding { none, bf16 };

struct MoeReferenceOutput {
  std::vector<std::vector<float>> out;      // [P][T_s·h], the layer output on each source rank
  std::vector<std::vector<float>> combine;  // [P][T_s·k·h], each source's combine buffer before the reduction
};

double silu(double x);
float round_to_bf16(float x);

// Throws InputError for inputs whose sizes do not match the problem (and everything build_routing throws).
MoeReferenceOutput reference_moe_layer(const MoeProblem& problem, const MoeInputs& inputs,
                                       StorageRounding rounding = StorageRounding::none);

}  // namespace xstage::moe
