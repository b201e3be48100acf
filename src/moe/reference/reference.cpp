#include "moe/reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "moe/problem/layout.hpp"
#include "moe/fp8/quantize.hpp"

namespace xstage::moe {

double silu(double x) { return x / (1.0 + std::exp(-x)); }

float round_to_bf16(float x) {
  if (std::isnan(x)) return x;
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  bits &= 0xFFFF0000u;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

namespace {

// W8A8 experts (docs/MOE.md "fp8 W8A8"): tokens quantized 1×128 on their source rank, the dispatch moves
// codes and scales, Linear-1 with W1 quantized 128×128 in its stored tile-interleaved row order, SwiGLU in
// fp32, the activation quantized 1×128 again, Linear-2 with W2 quantized 128×128; both GEMMs promote each
// 128-wide K block with fp32(scale_a · scale_w) (fp8_block_gemm); combine rows in bf16 when asked.
void fp8_expert_layers(const MoeProblem& pr, const MoeInputs& in, const Routing& routing, MoeReferenceOutput& res,
                       bool combine_bf16) {
  const int P = pr.P_ranks, k = pr.top_k, h = pr.h_hidden, hi = pr.h_inter;
  const auto sz = [](long long v) { return static_cast<std::size_t>(v); };
  XSTAGE_REQUIRE(h % fp8::kBlock == 0 && hi % fp8::kBlock == 0,
                 "reference fp8: h and h_inter must be multiples of 128 (the fp8 scale block)");
  // Layer input: each source quantizes its own tokens per (token, 128-column block).
  std::vector<Fp8Activations> tokens_q;
  for (int s = 0; s < P; ++s) tokens_q.push_back(quantize_activations(in.tokens[s].data(), in.topk[s].tokens, h));
  // Stored W1 column j (kernel order) holds logical row l1_logical_row(j / b_n, j % b_n); gate c / up c sit at:
  std::vector<int> stored_of_logical(2 * hi);
  for (int j = 0; j < 2 * hi; ++j) stored_of_logical[sz(l1_logical_row(j / pr.b_n, j % pr.b_n, pr.b_n, hi))] = j;
  std::vector<float> w1_stored(sz(2LL * hi * h));
  for (int owner = 0; owner < P; ++owner) {
    const int* O = routing.owner_first_row(owner);
    for (int e = 0; e < pr.E_local(); ++e) {
      const int ge = pr.global_expert(owner, e);
      const int rows = routing.expert_rows[ge];
      if (rows == 0) continue;
      const float* W1 = in.weights.W1.data() + sz(static_cast<long long>(ge) * 2 * hi * h);
      for (int j = 0; j < 2 * hi; ++j) {
        const float* src = W1 + sz(static_cast<long long>(l1_logical_row(j / pr.b_n, j % pr.b_n, pr.b_n, hi)) * h);
        std::copy(src, src + h, w1_stored.begin() + static_cast<std::ptrdiff_t>(static_cast<long long>(j) * h));
      }
      const Fp8Weights w1q = quantize_weights(w1_stored.data(), 2 * hi, h);
      const Fp8Weights w2q = quantize_weights(in.weights.W2.data() + sz(static_cast<long long>(ge) * h * hi), h, hi);
      // The expert's dispatch rows: codes and scales copied from the source ranks (the pull).
      Fp8Activations x;
      x.rows = rows;
      x.cols = h;
      x.scale_pitch = (rows + 3) / 4 * 4;
      x.codes.assign(sz(static_cast<long long>(rows) * h), 0);
      x.scales.assign(sz(static_cast<long long>(h / fp8::kBlock) * x.scale_pitch), 1.0f);
      const std::int64_t first = static_cast<std::int64_t>(O[e]) * pr.b_m;
      std::vector<RowSource> sources(sz(rows));
      for (int r = 0; r < rows; ++r) {
        const RowSource src = routing.row_source[owner][first + r];
        if (!src.valid()) throw Error("reference: dispatch row " + std::to_string(first + r) + " of a real pair has no source");
        sources[sz(r)] = src;
        const Fp8Activations& tq = tokens_q[sz(src.rank)];
        const int t = src.pair / k;
        std::copy(tq.codes.begin() + static_cast<std::ptrdiff_t>(static_cast<long long>(t) * h),
                  tq.codes.begin() + static_cast<std::ptrdiff_t>(static_cast<long long>(t + 1) * h),
                  x.codes.begin() + static_cast<std::ptrdiff_t>(static_cast<long long>(r) * h));
        for (int kb = 0; kb < h / fp8::kBlock; ++kb) x.scale(r, kb) = tq.scale(t, kb);
      }
      const std::vector<double> y = fp8_block_gemm(x, w1q);  // [rows][2·hi], stored column order
      std::vector<float> act(sz(static_cast<long long>(rows) * hi));
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < hi; ++c) {
          const double g = y[sz(static_cast<long long>(r) * 2 * hi + stored_of_logical[sz(c)])];
          const double u = y[sz(static_cast<long long>(r) * 2 * hi + stored_of_logical[sz(hi + c)])];
          act[sz(static_cast<long long>(r) * hi + c)] = static_cast<float>(silu(g) * u);  // the fp32 SwiGLU value
        }
      const Fp8Activations aq = quantize_activations(act.data(), rows, hi);  // Linear-2 input, 1×128 again
      const std::vector<double> z = fp8_block_gemm(aq, w2q);                 // [rows][h]
      for (int r = 0; r < rows; ++r) {
        float* dst = res.combine[sz(sources[sz(r)].rank)].data() + sz(static_cast<long long>(sources[sz(r)].pair) * h);
        for (int n = 0; n < h; ++n) {
          const float v = static_cast<float>(z[sz(static_cast<long long>(r) * h + n)]);  // the fp32 accumulator
          dst[n] = combine_bf16 ? round_to_bf16(v) : v;
        }
      }
    }
  }
}

}  // namespace

MoeReferenceOutput reference_moe_layer(const MoeProblem& pr, const MoeInputs& in, StorageRounding rounding) {
  const Routing routing = build_routing(pr, in.topk);
  const int P = pr.P_ranks, E = pr.E_experts, k = pr.top_k, h = pr.h_hidden, hi = pr.h_inter;
  const auto sz = [](long long v) { return static_cast<std::size_t>(v); };
  XSTAGE_REQUIRE(in.tokens.size() == sz(P), "reference: tokens for " + std::to_string(in.tokens.size()) + " ranks, need P");
  for (int s = 0; s < P; ++s)
    XSTAGE_REQUIRE(in.tokens[s].size() == sz(static_cast<long long>(in.topk[s].tokens) * h),
                   "reference: rank " + std::to_string(s) + " tokens must be [T_s][h]");
  XSTAGE_REQUIRE(in.weights.W1.size() == sz(static_cast<long long>(E) * 2 * hi * h), "reference: W1 must be [E][2*h_inter][h]");
  XSTAGE_REQUIRE(in.weights.W2.size() == sz(static_cast<long long>(E) * h * hi), "reference: W2 must be [E][h][h_inter]");
  const bool round_bf16 = rounding == StorageRounding::bf16;
  for (int s = 0; s < P; ++s)
    XSTAGE_REQUIRE(in.topk[s].weights.size() == sz(static_cast<long long>(in.topk[s].tokens) * k),
                   "reference: rank " + std::to_string(s) + " top-k weights must be [T_s][k]");
  const auto to_bf16 = [](bool on, double v) { return on ? round_to_bf16(static_cast<float>(v)) : static_cast<float>(v); };
  const bool combine_bf16 = round_bf16 && pr.out_bytes == 2;

  MoeReferenceOutput res;
  res.out.resize(P);
  res.combine.resize(P);
  for (int s = 0; s < P; ++s) {
    res.out[s].assign(sz(static_cast<long long>(in.topk[s].tokens) * h), 0.0f);
    res.combine[s].assign(sz(static_cast<long long>(in.topk[s].tokens) * k * h), 0.0f);
  }
  if (pr.dtype == DType::fp8_e4m3) {
    fp8_expert_layers(pr, in, routing, res, combine_bf16);
  } else {
    std::vector<double> y(2 * hi);
    std::vector<float> act(hi);
    for (int owner = 0; owner < P; ++owner) {
      const int* O = routing.owner_first_row(owner);
      for (int e = 0; e < pr.E_local(); ++e) {
        const int ge = pr.global_expert(owner, e);
        const float* W1 = in.weights.W1.data() + sz(static_cast<long long>(ge) * 2 * hi * h);
        const float* W2 = in.weights.W2.data() + sz(static_cast<long long>(ge) * h * hi);
        const std::int64_t first = static_cast<std::int64_t>(O[e]) * pr.b_m;
        for (std::int64_t row = first; row < first + routing.expert_rows[ge]; ++row) {
          const RowSource src = routing.row_source[owner][row];
          if (!src.valid()) throw Error("reference: dispatch row " + std::to_string(row) + " of a real pair has no source");
          const float* x = in.tokens[src.rank].data() + sz(static_cast<long long>(src.pair / k) * h);  // the pulled row
          for (int n = 0; n < 2 * hi; ++n) {
            double acc = 0.0;
            for (int c = 0; c < h; ++c) acc += static_cast<double>(W1[sz(static_cast<long long>(n) * h + c)]) * x[c];
            y[n] = acc;
          }
          for (int c = 0; c < hi; ++c) act[c] = to_bf16(round_bf16, silu(y[c]) * y[hi + c]);  // SwiGLU: gate first, then up
          float* dst = res.combine[src.rank].data() + sz(static_cast<long long>(src.pair) * h);
          for (int n = 0; n < h; ++n) {
            double acc = 0.0;
            for (int c = 0; c < hi; ++c) acc += static_cast<double>(W2[sz(static_cast<long long>(n) * hi + c)]) * act[c];
            dst[n] = to_bf16(combine_bf16, acc);
          }
        }
      }
    }
  }
  // The top-k reduction on each source rank: a local sum over its own combine rows.
  for (int s = 0; s < P; ++s)
    for (int t = 0; t < in.topk[s].tokens; ++t)
      for (int n = 0; n < h; ++n) {
        double acc = 0.0;
        for (int j = 0; j < k; ++j)
          acc += static_cast<double>(in.topk[s].weights[sz(static_cast<long long>(t) * k + j)]) *
                 res.combine[s][sz((static_cast<long long>(t) * k + j) * h + n)];
        res.out[s][sz(static_cast<long long>(t) * h + n)] = static_cast<float>(acc);
      }
  return res;
}

}  // namespace xstage::moe
