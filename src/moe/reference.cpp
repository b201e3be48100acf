#include "moe/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.hpp"

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

MoeReferenceOutput reference_moe_layer(const MoeProblem& pr, const MoeInputs& in, StorageRounding rounding) {
  const Routing routing = build_routing(pr, in.topk);
  const int P = pr.P_ranks, E = pr.E_experts, k = pr.top_k, h = pr.h_hidden, hi = pr.h_inter;
  const auto sz = [](long long v) { return static_cast<std::size_t>(v); };
  require_input(in.tokens.size() == sz(P), "reference: tokens for " + std::to_string(in.tokens.size()) + " ranks, need P");
  for (int s = 0; s < P; ++s)
    require_input(in.tokens[s].size() == sz(static_cast<long long>(in.topk[s].tokens) * h),
                  "reference: rank " + std::to_string(s) + " tokens must be [T_s][h]");
  require_input(in.weights.W1.size() == sz(static_cast<long long>(E) * 2 * hi * h), "reference: W1 must be [E][2*h_inter][h]");
  require_input(in.weights.W2.size() == sz(static_cast<long long>(E) * h * hi), "reference: W2 must be [E][h][h_inter]");
  const bool round_bf16 = rounding == StorageRounding::bf16;
  for (int s = 0; s < P; ++s)
    require_input(in.topk[s].weights.size() == sz(static_cast<long long>(in.topk[s].tokens) * k),
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
