// The reference attention every check compares against (one reference per op).
//
// GPU: one 128-thread block per (b, h, query row); fp32 scores from the bf16 inputs, two-pass softmax
// (pass 1: row max; pass 2: exp, sum and P V accumulation), fp32 output. Fast enough for M up to ~16K.
// CPU: float64, for tiny shapes, also used to check the GPU reference itself.
// Both write O as packed fp32/fp64 [batch, seqlen_q, heads, head_dim] and LSE as [batch, heads, seqlen_q].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "attention/flash_fwd_params.hpp"

namespace xstage::attention {

// args.o and args.lse are ignored; o_ref and lse_ref are device pointers. Per-batch key lengths
// (args.seqlen_k_per_batch, device memory) are clamped as the kernel clamps them (clamp_seqlen_k).
void reference_attention_gpu(FlashFwdArgs const& args, float* o_ref, float* lse_ref, cudaStream_t stream = nullptr);

// Host copies of Q, K, V as bf16 bit patterns with the strides in `problem`; seqlen_k_per_batch: nullptr, or the
// [batch] key lengths in host memory (clamped as the kernel clamps them).
void reference_attention_cpu(FlashFwdProblem const& problem, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             std::vector<double>& o_ref, std::vector<double>& lse_ref,
                             const int32_t* seqlen_k_per_batch = nullptr);

inline float bf16_bits_to_float(uint16_t bits) {
  union {
    uint32_t u;
    float f;
  } x{uint32_t(bits) << 16};
  return x.f;
}

}  // namespace xstage::attention
