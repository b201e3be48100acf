#include "moe/problem/routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "common/error.hpp"

namespace xstage::moe {

namespace {

std::string s(long long v) { return std::to_string(v); }

// mt19937_64 is specified exactly by the standard; the <random> distributions are not, so the
// generators map raw draws themselves to stay identical across standard libraries.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::vector<int> seeded_permutation(int n, std::mt19937_64& rng) {
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = n - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<int>(rng() % static_cast<std::uint64_t>(i + 1))]);
  return perm;
}

// Positive router weights that sum to 1 per token, as a softmax over the top-k would give.
void fill_weights(RankTopK& r, int k, std::mt19937_64& rng) {
  r.weights.resize(static_cast<std::size_t>(r.tokens) * k);
  for (int t = 0; t < r.tokens; ++t) {
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += (r.weights[t * k + j] = static_cast<float>(0.1 + uniform01(rng)));
    for (int j = 0; j < k; ++j) r.weights[t * k + j] = static_cast<float>(r.weights[t * k + j] / sum);
  }
}

}  // namespace

int Routing::valid_rows(int owner, int p) const {
  const int* O = owner_first_row(owner);
  const int e = static_cast<int>(std::upper_bound(O, O + problem.E_local() + 1, p) - O) - 1;
  const int rows = expert_rows[problem.global_expert(owner, e)];
  return std::min(problem.b_m, rows - (p - O[e]) * problem.b_m);
}

Routing build_routing(const MoeProblem& pr, const std::vector<RankTopK>& topk) {
  validate(pr);
  const int P = pr.P_ranks, E = pr.E_experts, k = pr.top_k, EL = pr.E_local();
  XSTAGE_REQUIRE(static_cast<int>(topk.size()) == P,
                 "routing: got top-k ids for " + s(static_cast<long long>(topk.size())) + " ranks, the problem has P = " + s(P));
  Routing r;
  r.problem = pr;
  r.tokens.resize(P);
  r.counts.assign(static_cast<std::size_t>(P) * E, 0);
  r.expert_rows.assign(E, 0);
  for (int src = 0; src < P; ++src) {
    const RankTopK& in = topk[src];
    XSTAGE_REQUIRE(in.tokens >= 0 && in.tokens <= pr.T_tokens,
                   "routing: rank " + s(src) + " has " + s(in.tokens) + " tokens, buffers hold T = " + s(pr.T_tokens));
    XSTAGE_REQUIRE(in.ids.size() == static_cast<std::size_t>(in.tokens) * k,
                   "routing: rank " + s(src) + " needs " + s(static_cast<long long>(in.tokens) * k) +
                       " top-k ids ([tokens][k]), got " + s(static_cast<long long>(in.ids.size())));
    r.tokens[src] = in.tokens;
    for (int t = 0; t < in.tokens; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = in.ids[t * k + j];
        XSTAGE_REQUIRE(e >= 0 && e < E, "routing: rank " + s(src) + " token " + s(t) + " slot " + s(j) +
                                            " names expert " + s(e) + ", outside [0, " + s(E) + ")");
        for (int j2 = 0; j2 < j; ++j2)
          XSTAGE_REQUIRE(in.ids[t * k + j2] != e, "routing: rank " + s(src) + " token " + s(t) + " names expert " +
                                                      s(e) + " twice (top-k ids must be distinct)");
        ++r.counts[count_index(src, e, E)];
        ++r.expert_rows[e];
      }
  }
  r.first_row.assign(static_cast<std::size_t>(P) * (EL + 1), 0);
  for (int owner = 0; owner < P; ++owner) expert_first_rows(r.counts.data(), pr, owner, r.first_row.data() + owner * (EL + 1));

  r.row_source.resize(P);
  for (int owner = 0; owner < P; ++owner) r.row_source[owner].assign(r.rows_used(owner), RowSource{});
  r.pair_row.resize(P);
  for (int src = 0; src < P; ++src) {
    const RankTopK& in = topk[src];
    r.pair_row[src].assign(static_cast<std::size_t>(in.tokens) * k, -1);
    std::vector<int> rank_in_source(E, 0);  // pairs of this source already placed, per expert (token order)
    for (int t = 0; t < in.tokens; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = in.ids[t * k + j], owner = pr.owner_rank(e);
        const std::int64_t row = dispatch_row(r.counts.data(), r.owner_first_row(owner), pr, e, src, rank_in_source[e]++);
        r.pair_row[src][t * k + j] = row;
        r.row_source[owner][row] = RowSource{src, t * k + j};
      }
  }
  return r;
}

std::vector<RankTopK> balanced_routing(const MoeProblem& pr, std::uint64_t seed) {
  validate(pr);
  std::mt19937_64 rng(seed);
  const int E = pr.E_experts, k = pr.top_k;
  const std::vector<int> perm = seeded_permutation(E, rng);
  std::vector<RankTopK> out(pr.P_ranks);
  for (int src = 0; src < pr.P_ranks; ++src) {
    RankTopK& r = out[src];
    r.tokens = pr.T_tokens;
    r.ids.resize(static_cast<std::size_t>(r.tokens) * k);
    // Global pair q = (src·T + t)·k + j walks the experts round-robin; k <= E consecutive q are distinct.
    for (int t = 0; t < r.tokens; ++t)
      for (int j = 0; j < k; ++j) {
        const std::int64_t q = (static_cast<std::int64_t>(src) * pr.T_tokens + t) * k + j;
        r.ids[t * k + j] = perm[q % E];
      }
    fill_weights(r, k, rng);
  }
  return out;
}

std::vector<RankTopK> skewed_routing(const MoeProblem& pr, double zipf_s, std::uint64_t seed) {
  validate(pr);
  XSTAGE_REQUIRE(std::isfinite(zipf_s) && zipf_s >= 0.0, "skewed routing: the Zipf exponent must be >= 0");
  std::mt19937_64 rng(seed);
  const int E = pr.E_experts, k = pr.top_k;
  const std::vector<int> perm = seeded_permutation(E, rng);
  std::vector<double> weight(E);
  for (int i = 0; i < E; ++i) weight[perm[i]] = 1.0 / std::pow(i + 1.0, zipf_s);
  std::vector<RankTopK> out(pr.P_ranks);
  std::vector<double> w(E);
  for (int src = 0; src < pr.P_ranks; ++src) {
    RankTopK& r = out[src];
    r.tokens = pr.T_tokens;
    r.ids.resize(static_cast<std::size_t>(r.tokens) * k);
    for (int t = 0; t < r.tokens; ++t) {
      w = weight;
      double total = std::accumulate(w.begin(), w.end(), 0.0);
      for (int j = 0; j < k; ++j) {  // draw without replacement: remove each pick's weight
        double x = uniform01(rng) * total;
        int e = 0;
        while (e < E - 1 && (w[e] == 0.0 || x >= w[e])) {
          if (w[e] > 0.0) x -= w[e];
          ++e;
        }
        while (w[e] == 0.0) --e;  // rounding ran past the last live expert
        r.ids[t * k + j] = e;
        total -= w[e];
        w[e] = 0.0;
      }
    }
    fill_weights(r, k, rng);
  }
  return out;
}

}  // namespace xstage::moe
