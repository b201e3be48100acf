// Online softmax over the rows of a wgmma accumulator tile, in the log2 domain.
//
// Each consumer thread holds 2 rows of its warpgroup's 64-row tile (SM90 accumulator layout
// ((2 cols, 2 rows, N/8 col groups), MMA_M = 1, MMA_N = 1)); the 4 threads of a quad share a row, so row
// reductions are two butterfly shuffles. Scores stay raw in the accumulator; p = 2^(s*scale_log2 - m*scale_log2)
// is one FFMA and one ex2 per element. Row sums are kept per thread and reduced across the quad once, at
// the end of the tile.
#pragma once

#include <cmath>
#include <cute/tensor.hpp>

namespace xstage::attention {

// View an SM90 accumulator fragment ((2,2,V), MMA_M, MMA_N) as (rows, cols).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto accumulator_rowcol(Layout const& acc) {
  using namespace cute;
  static_assert(rank(Layout{}) == 3 && rank(get<0>(Layout{})) == 3, "expects an SM90 wgmma accumulator");
  auto v = get<0>(acc);
  return make_layout(make_layout(get<1>(v), get<1>(acc)), make_layout(get<0>(v), get<2>(v), get<2>(acc)));
}

CUTE_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

CUTE_DEVICE float quad_allreduce_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

CUTE_DEVICE float quad_allreduce_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kRows, int kChains_, bool kLoopRowMaxTests_ = true>
struct OnlineSoftmax {
  static constexpr int kNumRows = kRows;
  float scale_log2;  // softmax_scale * log2(e)
  float row_max[kRows];
  float row_sum[kRows];

  // Row max and row sum as kChains independent partial reductions, combined pairwise at the end: one running
  // value over a thread's b_n/4 columns is a chain of b_n/4 dependent FMNMX (FADD) instructions, whose latency
  // the softmax of one warpgroup cannot hide while the other warpgroup's wgmma runs. More chains cost registers
  // (the count per configuration: FlashFwdTileConfig::kSoftmaxChains).
  static constexpr int kChains = kChains_;
  static constexpr bool kLoopRowMaxTests = kLoopRowMaxTests_;
  static_assert(kChains == 1 || kChains == 2 || kChains == 4, "1, 2 or 4 reduction chains");
  template <class Op>
  CUTE_DEVICE static float combine_chains(float (&chain)[kChains], Op op) {
    if constexpr (kChains == 4) return op(op(chain[0], chain[1]), op(chain[2], chain[3]));
    else if constexpr (kChains == 2) return op(chain[0], chain[1]);
    else return chain[0];
  }

  CUTE_DEVICE explicit OnlineSoftmax(float softmax_scale) : scale_log2(softmax_scale * float(M_LOG2E)) {}

  CUTE_DEVICE void reset() {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // Row r's new maximum (over the running one and this block's columns, kChains chains, then the quad): updates
  // row_max[r], returns in `o_rescale` the factor for the output so far and the new maximum scaled.
  // kMaybeUnset: the running maximum may still be -inf (a tile's first block) or the block's scores all -inf (masked).
  // After a tile's first block both are finite (that block holds at least one key of every row: key lengths are
  // clamped to >= 1), so the two tests and selects on the row's critical path can be left out there; for finite scores
  // the two forms compute the same bits. Whether the loop leaves them out is kLoopRowMaxTests (per configuration:
  // FlashFwdTileConfig::kLoopRowMaxTests).
  template <bool kMaybeUnset, class TensorRC>
  CUTE_DEVICE float new_row_max(TensorRC const& s, int r, float& o_rescale) {
    constexpr int kCols = decltype(cute::size<1>(s))::value;
    float chain[kChains];
    CUTE_UNROLL
    for (int i = 0; i < kChains; ++i) chain[i] = s(r, i);
    CUTE_UNROLL
    for (int c = kChains; c < kCols; ++c) chain[c % kChains] = fmaxf(chain[c % kChains], s(r, c));
    float m = fmaxf(row_max[r], combine_chains(chain, [](float a, float b) { return fmaxf(a, b); }));
    m = quad_allreduce_max(m);
    float m_scaled, previous = row_max[r];
    if constexpr (kMaybeUnset) {
      // A row whose scores are all -inf so far (fully masked) keeps max 0 so no inf - inf = NaN appears.
      const float m_safe = (m == -INFINITY) ? 0.f : m;
      m_scaled = m_safe * scale_log2;
      previous = previous == -INFINITY ? m_safe : previous;
    } else {
      m_scaled = m * scale_log2;
    }
    o_rescale = fast_exp2(previous * scale_log2 - m_scaled);
    row_max[r] = m;
    return m_scaled;
  }

  // Turns the raw scores in `acc_s` into unnormalised probabilities against the running row maximum,
  // and returns in `o_rescale` the factor by which the output accumulated so far must be multiplied.
  template <class TensorS>
  CUTE_DEVICE void update(TensorS& acc_s, float (&o_rescale)[kRows]) {
    using namespace cute;
    Tensor s = make_tensor(acc_s.data(), accumulator_rowcol(acc_s.layout()));
    static_assert(decltype(size<0>(s))::value == kRows);
    constexpr int kCols = decltype(size<1>(s))::value;
    static_assert(kCols % kChains == 0, "columns per thread must split into the reduction chains");
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float m_scaled = new_row_max<true>(s, r, o_rescale[r]);
      exponentiate_from<0>(s, r, m_scaled, 0.f, o_rescale[r]);
    }
  }

  // The same step in two parts, for the consumer loop to wait for the previous block's P·V wgmma in between:
  // `update_first` takes every row's new maximum and rescale factor and the exponentials of the first kFirstCols
  // columns; `update_rest` the other columns and the row sums. `partial` carries each row's sums of the first part,
  // in one chain. `update` keeps its one-pass order (a row's maximum, then its exponentials) for a tile's first block:
  // written as these two parts (every column in the second) or with the first part's sums in kChains chains, ptxas
  // scheduled the loop 1-2% slower
  // at d = 128 (results/h200/attention/2026-12-02-first-exps/, `final/`).
  template <int kFirstCols, class TensorS>
  CUTE_DEVICE void update_first(TensorS& acc_s, float (&o_rescale)[kRows], float (&m_scaled)[kRows],
                                float (&partial)[kRows]) {
    using namespace cute;
    Tensor s = make_tensor(acc_s.data(), accumulator_rowcol(acc_s.layout()));
    constexpr int kCols = decltype(size<1>(s))::value;
    static_assert(kCols % kChains == 0 && kFirstCols <= kCols);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) m_scaled[r] = new_row_max<kLoopRowMaxTests>(s, r, o_rescale[r]);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      partial[r] = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < kFirstCols; ++c) {
        const float p = fast_exp2(s(r, c) * scale_log2 - m_scaled[r]);
        s(r, c) = p;
        partial[r] += p;
      }
    }
  }

  template <int kFirstCols, class TensorS>
  CUTE_DEVICE void update_rest(TensorS& acc_s, float const (&o_rescale)[kRows], float const (&m_scaled)[kRows],
                               float const (&partial)[kRows]) {
    using namespace cute;
    Tensor s = make_tensor(acc_s.data(), accumulator_rowcol(acc_s.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) exponentiate_from<kFirstCols>(s, r, m_scaled[r], partial[r], o_rescale[r]);
  }

  // Columns [kBegin, end) of row r: p = 2^(s*scale_log2 - m_scaled) in place, their sum in kChains chains (the first
  // starting from `partial`, the sum of the columns before kBegin); row_sum[r] rescaled and that sum added.
  template <int kBegin, class TensorRC>
  CUTE_DEVICE void exponentiate_from(TensorRC& s, int r, float m_scaled, float partial, float o_rescale) {
    constexpr int kCols = decltype(cute::size<1>(s))::value;
    float chain[kChains];
    CUTE_UNROLL
    for (int i = 0; i < kChains; ++i) chain[i] = 0.f;
    chain[0] = partial;
    CUTE_UNROLL
    for (int c = kBegin; c < kCols; ++c) {
      const float p = fast_exp2(s(r, c) * scale_log2 - m_scaled);
      s(r, c) = p;
      chain[c % kChains] += p;
    }
    row_sum[r] = row_sum[r] * o_rescale + combine_chains(chain, [](float a, float b) { return a + b; });
  }

  template <class TensorO>
  CUTE_DEVICE static void rescale(TensorO& acc_o, float const (&o_rescale)[kRows]) {
    using namespace cute;
    Tensor o = make_tensor(acc_o.data(), accumulator_rowcol(acc_o.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= o_rescale[r];
    }
  }

  // Normalises the output rows by their softmax denominators; returns each row's natural-log LSE
  // (softmax_scale * max + ln(sum)) in `lse`.
  template <class TensorO>
  CUTE_DEVICE void finalize(TensorO& acc_o, float (&lse)[kRows]) {
    using namespace cute;
    Tensor o = make_tensor(acc_o.data(), accumulator_rowcol(acc_o.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_allreduce_sum(row_sum[r]);
      const bool empty = !(sum > 0.f);  // no key contributed (cannot happen with seqlen_k >= 1)
      const float inv = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? -INFINITY : (row_max[r] * scale_log2 + __log2f(sum)) * float(M_LN2);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= inv;
    }
  }
};

}  // namespace xstage::attention
