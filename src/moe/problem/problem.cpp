#include "moe/problem/problem.hpp"

#include "common/error.hpp"

namespace xstage::moe {

namespace {

std::string s(long long v) { return std::to_string(v); }

}  // namespace

int default_tile_n(DType dtype, int h, int I) {
  const bool l1_256 = (2 * I) % 256 == 0;
  const bool wide = dtype == DType::fp8_e4m3 ? l1_256 && h % 128 == 0 : l1_256 && h % 256 == 0;
  return wide ? 256 : 128;
}

void validate(const MoeProblem& p) {
  XSTAGE_REQUIRE(p.P_ranks >= 1, "MoE: P (ranks) must be at least 1 (got " + s(p.P_ranks) + ")");
  XSTAGE_REQUIRE(p.E_experts >= 1, "MoE: E (experts) must be at least 1 (got " + s(p.E_experts) + ")");
  XSTAGE_REQUIRE(p.E_experts % p.P_ranks == 0,
                 "MoE: E = " + s(p.E_experts) + " experts cannot be split evenly over P = " + s(p.P_ranks) +
                     " ranks; use an E that is a multiple of P");
  XSTAGE_REQUIRE(p.top_k >= 1 && p.top_k <= p.E_experts,
                 "MoE: top_k = " + s(p.top_k) + " must be in [1, E = " + s(p.E_experts) + "]");
  XSTAGE_REQUIRE(p.T_tokens >= 1, "MoE: T (tokens per rank) must be at least 1 (got " + s(p.T_tokens) + ")");
  XSTAGE_REQUIRE(p.h_hidden >= 1 && p.h_inter >= 1,
                 "MoE: h and h_inter must be positive (got " + s(p.h_hidden) + ", " + s(p.h_inter) + ")");
  XSTAGE_REQUIRE(p.b_m >= 64 && p.b_m <= 256 && p.b_m % 64 == 0,
                 "MoE: b_m = " + s(p.b_m) + " must be 64, 128, 192 or 256 (one wgmma M = 64 per consumer warpgroup)");
  XSTAGE_REQUIRE(p.b_n >= 16 && p.b_n <= 256 && p.b_n % 16 == 0,
                 "MoE: b_n = " + s(p.b_n) + " must be a multiple of 16 in [16, 256] (wgmma N)");
  XSTAGE_REQUIRE(p.out_bytes == 2 || p.out_bytes == 4,
                 "MoE: out_bytes (combine element) must be 2 (bf16) or 4 (fp32), got " + s(p.out_bytes));
  const int b_k = p.b_k();
  const std::string tile = " (tile " + s(p.b_m) + "x" + s(p.b_n) + ", b_k = " + s(b_k) + " for this dtype)";
  XSTAGE_REQUIRE(p.h_hidden % p.l2_n_quantum() == 0,
                 "MoE: h = " + s(p.h_hidden) + " must be a multiple of " + s(p.l2_n_quantum()) +
                     ": it is Linear-2's N, cut into b_n-wide blocks of which only the last may be half full" + tile);
  XSTAGE_REQUIRE(p.h_hidden % b_k == 0,
                 "MoE: h = " + s(p.h_hidden) + " must be a multiple of b_k: it is Linear-1's K" + tile);
  XSTAGE_REQUIRE((2 * p.h_inter) % p.b_n == 0,
                 "MoE: 2*h_inter = " + s(2LL * p.h_inter) +
                     " must be a multiple of b_n: it is Linear-1's N, and each L1 tile holds b_n/2 gate and b_n/2 up "
                     "columns" + tile);
  XSTAGE_REQUIRE(p.h_inter % b_k == 0,
                 "MoE: h_inter = " + s(p.h_inter) + " must be a multiple of b_k: it is Linear-2's K" + tile);
}

std::string describe(const MoeProblem& p) {
  return "P=" + s(p.P_ranks) + " E=" + s(p.E_experts) + " (" + s(p.E_local()) + "/rank) k=" + s(p.top_k) +
         " h=" + s(p.h_hidden) + " h_inter=" + s(p.h_inter) + " T=" + s(p.T_tokens) + " tile=" + s(p.b_m) + "x" +
         s(p.b_n) + (p.dtype == DType::bf16 ? " bf16" : " fp8_e4m3");
}

}  // namespace xstage::moe
