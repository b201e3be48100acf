// The unfused fp8 layer's expert-major rows, padded per expert for cuBLASLt's block-scaled fp8 GEMM, and
// where each row's 1×128 scales go. Host index math (CPU-tested) plus XSTAGE_HD lookups the kernels share.
//
// Why padding: cuBLASLt's 128-element 1D / 128×128 2D block-scaled fp8 GEMM (Hopper only) requires the
// GEMM's M and N to be multiples of 4 (cuBLAS docs, "128-element 1D and 128x128 2D Block Scaling For FP8
// Data Types", "Scaling factors layouts"). Per expert, C^T = W·X^T is cuBLAS M = the weight's rows (a
// multiple of 128) and N = the expert's rows, any count. So expert e's rows start at padded row
// first[e] (a multiple of 4) and occupy round_up(rows_e, 4) rows; the padding rows hold zero codes with scale
// 1, so their outputs are exactly 0 and nothing reads them.
//
// Scales: cuBLASLt's VEC128_32F operand B (our activations X, N = padded rows) wants an "N-major" N × L
// tensor, L = K/128: the L scales of one row are N apart, one K block's scales contiguous. That is
// quantize.hpp's activation layout of one expert ([K/128][round_up(rows_e, 4)]), so the experts' scale
// tensors are stacked: expert e's starts at L · first[e] floats (16 B aligned, as cuBLASLt requires, since
// first[e] is a multiple of 4), and (padded row p, block kb) is at L·first[e] + kb·N_e + (p − first[e]).
// The weights' BLK128x128_32F operand A needs no conversion: K-major [N/128][round_up(K/128, 4)] is
// quantize.hpp's weight layout (layer.hpp's W1_scales / W2_scales).
#pragma once

#include <cstdint>
#include <vector>

#include "common/host_device.hpp"
#include "moe/baseline/alltoall_plan.hpp"

namespace xstage::moe {

struct Fp8ExpertRows {
  std::vector<std::int32_t> first;           // [E_local + 1] padded first row per expert; first[E_local] = total
  std::vector<std::int32_t> padded_to_recv;  // [total] receive row of each padded row, -1 for a padding row
  std::vector<std::int32_t> recv_to_padded;  // [rows_received] padded row of each receive row
  std::int64_t total() const { return first.empty() ? 0 : first.back(); }
};

// From the plan's unpadded expert-major order (expert_first_row, expert_row_to_recv_row).
Fp8ExpertRows pad_expert_rows(const AllToAllPlan& plan);

// The most padded rows an owner can need: max_rows_received plus 3 per local expert.
std::int64_t max_fp8_expert_rows(const MoeProblem& problem);

// The local expert whose padded rows hold row p (first has E_local + 1 entries, p in [0, first[E_local])).
XSTAGE_HD inline int expert_of_padded_row(const std::int32_t* first, int E_local, std::int64_t p) {
  int lo = 0, hi = E_local;  // first[lo] <= p < first[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first[mid] <= p) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Index of the scale of (padded row p of expert e, K block kb) in the stacked VEC128 scale tensors of a GEMM
// with L = K/128 blocks (see above).
XSTAGE_HD inline std::int64_t vec128_scale_index(const std::int32_t* first, int e, int L, std::int64_t p, int kb) {
  const std::int64_t base = first[e], n_e = first[e + 1] - base;
  return L * base + kb * n_e + (p - base);
}

}  // namespace xstage::moe
