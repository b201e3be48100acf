// Shared helpers for the MoE CPU tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "moe/problem/problem.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe::test {

// A small valid problem: tile 128x128, bf16, h = 2·b_n·scale_h... callers override fields.
inline MoeProblem small_problem(int P, int E, int k, int T) {
  MoeProblem p;
  p.P_ranks = P;
  p.E_experts = E;
  p.top_k = k;
  p.T_tokens = T;
  p.h_hidden = 256;
  p.h_inter = 128;
  p.b_m = 128;
  p.b_n = 128;
  return p;
}

// A layer of the given shape (128-row tiles, b_n columns), not validated: callers that want it valid call validate().
inline MoeProblem layer_problem(int h, int I, int E, int k, int T, DType dtype, int b_n, int P) {
  MoeProblem p;
  p.P_ranks = P;
  p.E_experts = E;
  p.top_k = k;
  p.h_hidden = h;
  p.h_inter = I;
  p.T_tokens = T;
  p.b_m = 128;
  p.b_n = b_n;
  p.dtype = dtype;
  return p;
}

// O_e from per-expert row counts (what expert_first_rows computes from the published counts).
inline std::vector<int> first_rows_from_counts(const std::vector<int>& rows, int b_m) {
  std::vector<int> O(rows.size() + 1, 0);
  for (std::size_t e = 0; e < rows.size(); ++e) O[e + 1] = O[e] + m_blocks(rows[e], b_m);
  return O;
}

// Random per-expert row counts with zeros and counts that are not multiples of b_m.
inline std::vector<int> random_expert_rows(std::mt19937_64& rng, int E_local, int b_m, int max_blocks) {
  std::vector<int> rows(E_local);
  for (int& r : rows) {
    const int kind = static_cast<int>(rng() % 4);
    if (kind == 0) r = 0;                                                           // no tokens
    else if (kind == 1) r = b_m * static_cast<int>(1 + rng() % max_blocks);         // exact multiple
    else r = static_cast<int>(1 + rng() % (static_cast<std::uint64_t>(b_m) * max_blocks));  // ragged
  }
  return rows;
}

}  // namespace xstage::moe::test
