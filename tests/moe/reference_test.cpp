// The CPU reference layer: a hand computation, a direct per-token formula on random problems, and the
// bf16 storage points.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.hpp"
#include "moe/reference/reference.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

// The smallest valid shape: h = 64 (b_k for bf16), h_inter = 64, tile 64x64 -> P1 = 2, P2 = 1.
MoeProblem tiny(int P, int E, int k, int T) {
  MoeProblem p = test::small_problem(P, E, k, T);
  p.h_hidden = 64;
  p.h_inter = 64;
  p.b_m = 64;
  p.b_n = 64;
  return p;
}

TEST(MoeReference, MatchesAHandComputation) {
  // P = 2 ranks, E = 2 experts (expert 0 on rank 0, expert 1 on rank 1), k = 2, one token per rank.
  // W1[e]: gate row c = (e+1)·δ(c, input c), up row c = 1 on input c -> gate_c = (e+1)·x_c, up_c = x_c.
  // W2[e]: identity scaled by (e+1).
  // So FFN_e(x)_c = (e+1)·silu((e+1)·x_c)·x_c, and out = w0·FFN_{id0}(x) + w1·FFN_{id1}(x).
  const MoeProblem pr = tiny(2, 2, 2, 1);
  const int h = 64, hi = 64;
  MoeInputs in;
  in.weights.W1.assign(2 * 2 * hi * h, 0.0f);
  in.weights.W2.assign(2 * h * hi, 0.0f);
  for (int e = 0; e < 2; ++e)
    for (int c = 0; c < hi; ++c) {
      in.weights.W1[(e * 2 * hi + c) * h + c] = static_cast<float>(e + 1);  // gate
      in.weights.W1[(e * 2 * hi + hi + c) * h + c] = 1.0f;                 // up
      in.weights.W2[(e * h + c) * hi + c] = static_cast<float>(e + 1);
    }
  in.tokens.resize(2);
  for (int s = 0; s < 2; ++s)
    for (int c = 0; c < h; ++c) in.tokens[s].push_back(0.25f * (c % 8) - 1.0f + 0.5f * s);
  in.topk = {RankTopK{1, {1, 0}, {0.75f, 0.25f}}, RankTopK{1, {0, 1}, {0.4f, 0.6f}}};
  const MoeReferenceOutput out = reference_moe_layer(pr, in);
  for (int s = 0; s < 2; ++s)
    for (int c = 0; c < h; ++c) {
      const double x = in.tokens[s][c];
      double want = 0;
      for (int j = 0; j < 2; ++j) {
        const int e = in.topk[s].ids[j];
        const double g = (e + 1) * x;
        const double ffn = (e + 1) * (g / (1 + std::exp(-g))) * x;
        want += in.topk[s].weights[j] * ffn;
        EXPECT_NEAR(out.combine[s][j * h + c], ffn, 1e-6) << "combine row (rank " << s << ", k " << j << ")";
      }
      EXPECT_NEAR(out.out[s][c], want, 1e-6) << "rank " << s << " c " << c;
    }
  // One value written out in full: rank 0, c = 0, x = -1: expert 1: g = -2, silu(-2) = -0.238406,
  // FFN = 2·(-0.238406)·(-1) = 0.476812; expert 0: g = -1, silu = -0.268941, FFN = 0.268941.
  EXPECT_NEAR(out.out[0][0], 0.75 * 0.476812 + 0.25 * 0.268941, 1e-5);
}

// out[s][t] = Σ_j w·W2[e]·(silu(W1g[e]·x)·W1u[e]·x): the layer without any buffers or index math.
std::vector<float> direct_layer(const MoeProblem& pr, const MoeInputs& in, int s) {
  const int h = pr.h_hidden, hi = pr.h_inter, k = pr.top_k;
  std::vector<float> out(static_cast<std::size_t>(in.topk[s].tokens) * h);
  for (int t = 0; t < in.topk[s].tokens; ++t) {
    std::vector<double> acc(h, 0.0);
    const float* x = &in.tokens[s][static_cast<std::size_t>(t) * h];
    for (int j = 0; j < k; ++j) {
      const int e = in.topk[s].ids[t * k + j];
      std::vector<double> a(hi);
      for (int c = 0; c < hi; ++c) {
        double g = 0, u = 0;
        for (int i = 0; i < h; ++i) {
          g += in.weights.W1[(static_cast<std::size_t>(e) * 2 * hi + c) * h + i] * static_cast<double>(x[i]);
          u += in.weights.W1[(static_cast<std::size_t>(e) * 2 * hi + hi + c) * h + i] * static_cast<double>(x[i]);
        }
        a[c] = silu(g) * u;
      }
      for (int n = 0; n < h; ++n) {
        double y = 0;
        for (int c = 0; c < hi; ++c) y += in.weights.W2[(static_cast<std::size_t>(e) * h + n) * hi + c] * a[c];
        acc[n] += in.topk[s].weights[t * k + j] * y;
      }
    }
    for (int n = 0; n < h; ++n) out[static_cast<std::size_t>(t) * h + n] = static_cast<float>(acc[n]);
  }
  return out;
}

MoeInputs random_inputs(const MoeProblem& pr, std::uint64_t seed, double zipf) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);  // values only; exact reproducibility is not needed here
  MoeInputs in;
  in.topk = zipf > 0 ? skewed_routing(pr, zipf, seed) : balanced_routing(pr, seed);
  in.tokens.resize(pr.P_ranks);
  for (int s = 0; s < pr.P_ranks; ++s)
    for (int i = 0; i < pr.T_tokens * pr.h_hidden; ++i) in.tokens[s].push_back(round_to_bf16(nd(rng)));
  const float s1 = 1.0f / std::sqrt(static_cast<float>(pr.h_hidden)), s2 = 1.0f / std::sqrt(static_cast<float>(pr.h_inter));
  for (long i = 0; i < static_cast<long>(pr.E_experts) * 2 * pr.h_inter * pr.h_hidden; ++i)
    in.weights.W1.push_back(round_to_bf16(s1 * nd(rng)));
  for (long i = 0; i < static_cast<long>(pr.E_experts) * pr.h_hidden * pr.h_inter; ++i)
    in.weights.W2.push_back(round_to_bf16(s2 * nd(rng)));
  return in;
}

TEST(MoeReference, ThroughTheBuffersEqualsTheDirectFormulaForP1To8) {
  for (int P : {1, 2, 4, 8}) {
    const MoeProblem pr = tiny(P, 2 * P, 2, 70);  // 70 tokens: ragged m-blocks, some experts busier
    const MoeInputs in = random_inputs(pr, 100 + P, P % 2 ? 1.2 : 0.0);
    const MoeReferenceOutput out = reference_moe_layer(pr, in);
    for (int s = 0; s < P; ++s) {
      const std::vector<float> want = direct_layer(pr, in, s);
      ASSERT_EQ(out.out[s].size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out.out[s][i], want[i], 1e-4) << "P=" << P << " rank " << s << " i " << i;
    }
  }
}

TEST(MoeReference, Bf16StoragePointsRoundButStayClose) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 1.0f / 256), 1.0f);               // tie -> even
  EXPECT_EQ(round_to_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);  // tie -> even (up)
  EXPECT_EQ(round_to_bf16(1.0f + 1.5f / 256), 1.0f + 2.0f / 256);
  const MoeProblem pr = tiny(2, 4, 2, 40);
  const MoeInputs in = random_inputs(pr, 5, 0.0);
  const MoeReferenceOutput exact = reference_moe_layer(pr, in), rounded = reference_moe_layer(pr, in, StorageRounding::bf16);
  double max_diff = 0, max_val = 0;
  bool differs = false;
  for (int s = 0; s < 2; ++s)
    for (std::size_t i = 0; i < exact.out[s].size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::abs(exact.out[s][i] - rounded.out[s][i])));
      max_val = std::max(max_val, static_cast<double>(std::abs(exact.out[s][i])));
      differs |= exact.out[s][i] != rounded.out[s][i];
    }
  EXPECT_TRUE(differs);
  EXPECT_LT(max_diff, 0.02 * max_val);
  for (float v : rounded.combine[0]) EXPECT_EQ(v, round_to_bf16(v));  // combine rows are bf16 values
}

TEST(MoeReference, WrongSizesAreInputErrors) {
  const MoeProblem pr = tiny(2, 2, 1, 4);
  MoeInputs in = random_inputs(pr, 1, 0.0);
  in.weights.W2.pop_back();
  EXPECT_THROW(reference_moe_layer(pr, in), InputError);
  in = random_inputs(pr, 1, 0.0);
  in.tokens[1].pop_back();
  EXPECT_THROW(reference_moe_layer(pr, in), InputError);
}

}  // namespace
}  // namespace xstage::moe
