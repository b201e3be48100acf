#include "moe/fp8/quantize.hpp"

#include <cmath>
#include <string>

#include "common/error.hpp"

namespace xstage::moe {
namespace {

int round_up4(int v) { return (v + 3) / 4 * 4; }

void require_block_multiple(int v, const char* what, const char* where) {
  XSTAGE_REQUIRE(v > 0 && v % fp8::kBlock == 0, std::string(where) + ": " + what + " = " + std::to_string(v) +
                                                    " must be a positive multiple of 128 (the fp8 scale block)");
}

void require_finite(float v, const char* where, long long index) {
  XSTAGE_REQUIRE(std::isfinite(v), std::string(where) + ": element " + std::to_string(index) +
                                       " is not finite; an fp8 block with inf/NaN has no scale");
}

const float* decode_table() {
  static const auto table = [] {
    static float t[256];
    for (int c = 0; c < 256; ++c) t[c] = fp8::e4m3_to_float(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

Fp8Activations quantize_activations(const float* x, int rows, int cols) {
  XSTAGE_REQUIRE(rows >= 0, "quantize_activations: rows must be >= 0");
  require_block_multiple(cols, "cols", "quantize_activations");
  Fp8Activations a;
  a.rows = rows;
  a.cols = cols;
  a.scale_pitch = round_up4(rows);
  a.codes.assign(static_cast<std::size_t>(rows) * cols, 0);
  a.scales.assign(static_cast<std::size_t>(a.k_blocks()) * a.scale_pitch, 1.0f);
  for (int r = 0; r < rows; ++r)
    for (int kb = 0; kb < a.k_blocks(); ++kb) {
      const float* blk = x + static_cast<std::size_t>(r) * cols + kb * fp8::kBlock;
      float amax = 0.0f;
      for (int c = 0; c < fp8::kBlock; ++c) {
        require_finite(blk[c], "quantize_activations", static_cast<long long>(r) * cols + kb * fp8::kBlock + c);
        amax = std::fmax(amax, std::fabs(blk[c]));
      }
      const fp8::BlockScale s = fp8::block_scale(amax);
      a.scale(r, kb) = s.scale;
      std::uint8_t* out = a.codes.data() + static_cast<std::size_t>(r) * cols + kb * fp8::kBlock;
      for (int c = 0; c < fp8::kBlock; ++c) out[c] = fp8::quantize_value(blk[c], s);
    }
  return a;
}

Fp8Activations quantize_activations_bf16(const std::uint16_t* x_bf16, int rows, int cols) {
  XSTAGE_REQUIRE(rows >= 0 && cols >= 0, "quantize_activations_bf16: negative shape");
  std::vector<float> x(static_cast<std::size_t>(rows) * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = fp8::bits_float(static_cast<std::uint32_t>(x_bf16[i]) << 16);
  return quantize_activations(x.data(), rows, cols);
}

Fp8Weights quantize_weights(const float* w, int n, int k) {
  require_block_multiple(n, "N", "quantize_weights");
  require_block_multiple(k, "K", "quantize_weights");
  Fp8Weights q;
  q.n = n;
  q.k = k;
  q.scale_pitch = static_cast<int>(fp8::weight_scale_pitch(k));
  q.codes.assign(static_cast<std::size_t>(n) * k, 0);
  q.scales.assign(static_cast<std::size_t>(q.n_blocks()) * q.scale_pitch, 1.0f);
  for (int nb = 0; nb < q.n_blocks(); ++nb)
    for (int kb = 0; kb < q.k_blocks(); ++kb) {
      float amax = 0.0f;
      for (int r = nb * fp8::kBlock; r < (nb + 1) * fp8::kBlock; ++r)
        for (int c = kb * fp8::kBlock; c < (kb + 1) * fp8::kBlock; ++c) {
          const float v = w[static_cast<std::size_t>(r) * k + c];
          require_finite(v, "quantize_weights", static_cast<long long>(r) * k + c);
          amax = std::fmax(amax, std::fabs(v));
        }
      const fp8::BlockScale s = fp8::block_scale(amax);
      q.scale(nb, kb) = s.scale;
      for (int r = nb * fp8::kBlock; r < (nb + 1) * fp8::kBlock; ++r)
        for (int c = kb * fp8::kBlock; c < (kb + 1) * fp8::kBlock; ++c)
          q.codes[static_cast<std::size_t>(r) * k + c] = fp8::quantize_value(w[static_cast<std::size_t>(r) * k + c], s);
    }
  return q;
}

std::vector<float> dequantize(const Fp8Activations& a) {
  const float* lut = decode_table();
  std::vector<float> x(static_cast<std::size_t>(a.rows) * a.cols);
  for (int r = 0; r < a.rows; ++r)
    for (int c = 0; c < a.cols; ++c)
      x[static_cast<std::size_t>(r) * a.cols + c] = lut[a.code(r, c)] * a.scale(r, c / fp8::kBlock);
  return x;
}

std::vector<float> dequantize(const Fp8Weights& w) {
  const float* lut = decode_table();
  std::vector<float> x(static_cast<std::size_t>(w.n) * w.k);
  for (int r = 0; r < w.n; ++r)
    for (int c = 0; c < w.k; ++c)
      x[static_cast<std::size_t>(r) * w.k + c] = lut[w.code(r, c)] * w.scale(r / fp8::kBlock, c / fp8::kBlock);
  return x;
}

std::vector<double> fp8_block_gemm(const Fp8Activations& a, const Fp8Weights& w) {
  XSTAGE_REQUIRE(a.cols == w.k, "fp8_block_gemm: activation cols " + std::to_string(a.cols) + " != weight K " +
                                    std::to_string(w.k));
  const float* lut = decode_table();
  std::vector<double> out(static_cast<std::size_t>(a.rows) * w.n, 0.0);
  std::vector<double> arow(a.cols);
  for (int r = 0; r < a.rows; ++r) {
    for (int c = 0; c < a.cols; ++c) arow[c] = lut[a.code(r, c)];
    for (int j = 0; j < w.n; ++j) {
      const std::uint8_t* wrow = w.codes.data() + static_cast<std::size_t>(j) * w.k;
      double acc = 0.0;
      for (int kb = 0; kb < w.k_blocks(); ++kb) {
        double block = 0.0;  // exact: 128 products of e4m3 values
        for (int c = kb * fp8::kBlock; c < (kb + 1) * fp8::kBlock; ++c) block += arow[c] * lut[wrow[c]];
        const float promote = a.scale(r, kb) * w.scale(j / fp8::kBlock, kb);  // fp32, as the kernel forms it
        acc += static_cast<double>(promote) * block;
      }
      out[static_cast<std::size_t>(r) * w.n + j] = acc;
    }
  }
  return out;
}

}  // namespace xstage::moe
