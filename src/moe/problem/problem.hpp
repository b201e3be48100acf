// The MoE layer one MegaMoE launch computes, and the tile grid it is cut into (paper §4.2).
//
// Expert parallelism over P ranks: rank r owns the E/P experts [r·E_local, (r+1)·E_local). Every rank
// holds up to T tokens of width h and, per token, top_k expert ids and weights (the router runs outside).
// Linear-1 maps h -> 2·h_inter (gate and up), SwiGLU gives h_inter, Linear-2 maps h_inter -> h.
//
// Tiles are b_m rows × b_n columns with a K step of b_k elements; b_k is one 128-byte TMA/wgmma swizzle
// row of the element type (64 bf16, 128 fp8), so every GEMM K dimension (h for L1, h_inter for L2) must be
// a multiple of it, and every N dimension (2·h_inter for L1, h for L2) a multiple of b_n — except that with
// b_n = 256, h may be an odd multiple of 128: the last L2 n-block of a row is then half full (DiT-like
// h = 1152 keeps 256-wide tiles, which the fp8 kernel needs for Linear-1).
// The struct is plain data with __host__ __device__ accessors so the kernel receives it by value.
#pragma once

#include <cstdint>
#include <string>

#include "common/host_device.hpp"

namespace xstage::moe {

// Element type of tokens, weights and the L1 output ring. fp8_e4m3 is W8A8: 1×128 activation and
// 128×128 weight block scales (docs/MOE.md, "fp8 W8A8").
enum class DType : std::uint8_t { bf16, fp8_e4m3 };

XSTAGE_HD constexpr int dtype_bytes(DType t) { return t == DType::bf16 ? 2 : 1; }

// The K step of one mainloop stage: one 128-byte swizzle row of the element type.
XSTAGE_HD constexpr int k_block_elems(DType t) { return 128 / dtype_bytes(t); }

XSTAGE_HD constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
XSTAGE_HD constexpr std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

struct MoeProblem {
  int P_ranks = 1;          // expert-parallel ranks in the NVLink domain
  int E_experts = 1;        // experts in the layer, all ranks together
  int top_k = 1;            // experts per token
  int h_hidden = 0;         // hidden size h (tokens in, combine rows out)
  int h_inter = 0;          // expert intermediate size (Linear-1 produces 2·h_inter: gate, then up)
  int T_tokens = 0;         // tokens per rank, the upper bound of every call (buffers are sized by it)
  int b_m = 128;            // tile rows (tokens); a multiple of 64, one wgmma M per consumer warpgroup
  int b_n = 128;            // tile columns
  DType dtype = DType::bf16;        // tokens, weights, L1 output
  int out_bytes = 2;                // s_out: bytes per combine element (bf16 = 2)

  XSTAGE_HD constexpr int E_local() const { return E_experts / P_ranks; }
  XSTAGE_HD constexpr int owner_rank(int expert) const { return expert / E_local(); }
  XSTAGE_HD constexpr int local_expert(int expert) const { return expert % E_local(); }
  XSTAGE_HD constexpr int global_expert(int rank, int e_local) const { return rank * E_local() + e_local; }
  XSTAGE_HD constexpr int b_k() const { return k_block_elems(dtype); }
  XSTAGE_HD constexpr int elem_bytes() const { return dtype_bytes(dtype); }
  // Scheduler-row widths (Algorithm 1's P1 and P2): N-blocks per row of each GEMM.
  XSTAGE_HD constexpr int P1_l1_n_blocks() const { return 2 * h_inter / b_n; }
  // With b_n = 256 and h an odd multiple of 128, the last L2 n-block of each row is half full.
  XSTAGE_HD constexpr int P2_l2_n_blocks() const { return static_cast<int>(ceil_div(h_hidden, b_n)); }
  // Columns of L2 n-block n that exist: b_n, except for a half-full last block.
  XSTAGE_HD constexpr int l2_block_cols(int n_block) const {
    return h_hidden - n_block * b_n < b_n ? h_hidden - n_block * b_n : b_n;
  }
  // What h must be a multiple of: b_n, or 128 for 256-wide tiles (whose last L2 n-block may be half full).
  XSTAGE_HD constexpr int l2_n_quantum() const { return b_n < 128 ? b_n : 128; }
  // SwiGLU halves each L1 tile: b_n/2 gate and b_n/2 up columns give b_n/2 intermediate columns.
  XSTAGE_HD constexpr int l1_out_cols_per_tile() const { return b_n / 2; }
};

// The tile width b_n of the fused layer for a shape: 256 (fewer, larger wgmma tiles) where Linear-1's
// N = 2·h_inter allows it and h is a multiple of 256 (bf16) or of 128 (fp8: the fused fp8 kernel needs
// 256-wide Linear-1 tiles, and an h that is an odd multiple of 128 leaves each row's last Linear-2 block half
// full), else 128.
int default_tile_n(DType dtype, int h_hidden, int h_inter);

// Throws InputError, naming the field and what would be valid, for any shape the kernel cannot run:
// E not divisible by P, top_k outside [1, E], h or h_inter off the b_n / b_k grid, bad tile sizes.
void validate(const MoeProblem& problem);

// One line for logs and docs: "P=8 E=256 (32/rank) k=8 h=7168 h_inter=2048 T=4096 tile=128x128 bf16".
std::string describe(const MoeProblem& problem);

}  // namespace xstage::moe
