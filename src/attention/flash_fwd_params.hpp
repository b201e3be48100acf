// The attention problem as the kernel sees it: sizes, element strides, pointers, softmax scale.
//
// Layout of Q, K, V and O is [batch, seq, heads, head_dim] (the Ulysses layout), with any strides for
// batch, seq and head; the head_dim stride is 1. Strides are in elements. This header is plain C++ so
// the host launcher, the CPU tests and the references share one definition of "where is element
// (b, m, h, c)".
#pragma once

#include <cstdint>
#include <optional>

#include "attention/key_split.hpp"
#include "attention/tile_shapes.hpp"
#include "common/host_device.hpp"

namespace xstage::attention {

// Element strides of one [batch, seq, heads, head_dim] tensor (head_dim stride is always 1).
struct BmhdStrides {
  int64_t batch = 0;
  int64_t row = 0;  // one step along the sequence
  int64_t head = 0;
};

// Strides of a densely packed [batch, seq, heads, head_dim] tensor.
constexpr BmhdStrides packed_bmhd_strides(int64_t seqlen, int64_t heads, int64_t head_dim) {
  return {seqlen * heads * head_dim, heads * head_dim, head_dim};
}

// Offset, in elements, of element (b, m, h, c).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int64_t bmhd_offset(const BmhdStrides& s, int64_t b, int64_t m, int64_t h, int64_t c) {
  return b * s.batch + m * s.row + h * s.head + c;
}

struct FlashFwdProblem {
  int batch = 1;
  int seqlen_q = 0;  // M of the issue; rows of Q and O
  int seqlen_k = 0;  // rows of K and V (equal to seqlen_q for self-attention)
  int heads = 1;
  int head_dim = 128;
  float softmax_scale = 0.f;  // usually 1/sqrt(head_dim)
  BmhdStrides q, k, v, o;
};

// Device pointers (bf16 for Q, K, V, O; fp32 for the optional log-sum-exp).
struct FlashFwdArgs {
  FlashFwdProblem problem;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // optional: [batch, heads, seqlen_q], natural-log log-sum-exp of the scaled scores
  // Optional: [batch] int32 in device memory, 4-byte aligned. Sequence b attends to its first
  // seqlen_k_per_batch[b] keys (a key-padding mask as lengths); problem.seqlen_k stays the allocated key length,
  // which sizes the TMA maps. The host cannot read the values without a synchronisation, so nothing checks
  // them: the kernel clamps each to [1, seqlen_k] (clamp_seqlen_k).
  const int32_t* seqlen_k_per_batch = nullptr;
  // Forces one tile configuration (tests, tuning); by default the launcher picks by wave count.
  std::optional<FwdTileConfigId> tile_config;
  // Whether the last partial wave of tiles may be split by key range over every SM (key_split.hpp). Never with
  // per-batch key lengths.
  KeySplitMode key_split = KeySplitMode::automatic;
};

// The keys a sequence attends to when its per-batch length is `requested`: clamped to [1, seqlen_k], so that an
// out-of-range value can neither read past the keys nor leave a row without one (the references clamp alike).
XSTAGE_HD constexpr int clamp_seqlen_k(int32_t requested, int seqlen_k) {
  return requested < 1 ? 1 : requested > seqlen_k ? seqlen_k : static_cast<int>(requested);
}

// Offset of the log-sum-exp of (b, h, m) in the [batch, heads, seqlen_q] fp32 array.
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int64_t lse_offset(int64_t heads, int64_t seqlen_q, int64_t b, int64_t h, int64_t m) {
  return (b * heads + h) * seqlen_q + m;
}

}  // namespace xstage::attention
