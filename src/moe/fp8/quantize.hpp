// Host-side fp8 W8A8 quantization in the layouts the kernel will read, its inverse, and the
// block-scaled GEMM with fp32 promotion that the CPU reference runs. Conventions: fp8.hpp.
//
// Layouts (every pitch in elements; all buffers start 128 B aligned when the kernel allocates them):
//   activation codes   [rows][cols] uint8, row-major, row pitch cols bytes (cols % 128 == 0, so 16 B rows)
//   activation scales  [cols/128][scale_pitch] fp32: COLUMN-major [rows, cols/128] ("MN-major"), i.e. the
//                      scales of one 128-column K block are contiguous over rows. scale_pitch =
//                      round_up(rows, 4), so every K block's column starts on 16 B (TMA global strides must be
//                      multiples of 16 B; the mainloop TMA-loads the b_m scales of one K block per stage).
//   weight codes       [N][K] uint8, row-major (K-major B operand, as W1/W2 are stored; 16 B rows)
//   weight scales      [N/128][scale_pitch] fp32: ROW-major [N/128, K/128], scale_pitch = fp8::weight_scale_pitch(K)
//                      = round_up(K/128, 4)
//                      (16 B rows: a CTA loads the K/128 scales of its n-block once per tile).
// Padding entries of a scale tensor hold 1.0f (never read by the math, but finite if a kernel over-reads).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/fp8/fp8.hpp"

namespace xstage::moe {

struct Fp8Activations {
  int rows = 0, cols = 0;
  int scale_pitch = 0;              // round_up(rows, 4)
  std::vector<std::uint8_t> codes;  // [rows][cols]
  std::vector<float> scales;        // [cols/128][scale_pitch]
  int k_blocks() const { return cols / fp8::kBlock; }
  float scale(int row, int k_block) const { return scales[static_cast<std::size_t>(k_block) * scale_pitch + row]; }
  float& scale(int row, int k_block) { return scales[static_cast<std::size_t>(k_block) * scale_pitch + row]; }
  std::uint8_t code(int row, int col) const { return codes[static_cast<std::size_t>(row) * cols + col]; }
};

struct Fp8Weights {
  int n = 0, k = 0;
  int scale_pitch = 0;              // fp8::weight_scale_pitch(k)
  std::vector<std::uint8_t> codes;  // [n][k]
  std::vector<float> scales;        // [n/128][scale_pitch]
  int n_blocks() const { return n / fp8::kBlock; }
  int k_blocks() const { return k / fp8::kBlock; }
  float scale(int n_block, int k_block) const { return scales[static_cast<std::size_t>(n_block) * scale_pitch + k_block]; }
  float& scale(int n_block, int k_block) { return scales[static_cast<std::size_t>(n_block) * scale_pitch + k_block]; }
  std::uint8_t code(int row, int col) const { return codes[static_cast<std::size_t>(row) * k + col]; }
};

// x: [rows][cols] row-major fp32 (or bf16 bit patterns), cols a positive multiple of 128. Throws
// InputError for a bad shape or a non-finite value (a block with inf/NaN has no scale).
Fp8Activations quantize_activations(const float* x, int rows, int cols);
Fp8Activations quantize_activations_bf16(const std::uint16_t* x_bf16, int rows, int cols);
// w: [n][k] row-major fp32, n and k positive multiples of 128. Same errors.
Fp8Weights quantize_weights(const float* w, int n, int k);

// code · scale for every element, [rows][cols] / [n][k] row-major fp32.
std::vector<float> dequantize(const Fp8Activations& a);
std::vector<float> dequantize(const Fp8Weights& w);

// out[r][j] = Σ_kb fp32(scale_a(r, kb) · scale_w(j/128, kb)) · Σ_{c in kb} e4m3(a[r][c]) · e4m3(w[j][c]),
// i.e. C = A · Wᵀ as DeepGEMM-style kernels compute it: each 128-wide K block's products of raw codes
// accumulated on their own (here exactly, in float64: products of two e4m3 values are exact and the sum of
// 128 of them fits in 53 bits), then promoted with the fp32 product of the two block scales. The promoted
// sum is accumulated in float64 (the kernel: fp32). Throws InputError unless a.cols == w.k.
// Result [a.rows][w.n] row-major, float64.
std::vector<double> fp8_block_gemm(const Fp8Activations& a, const Fp8Weights& w);

}  // namespace xstage::moe
