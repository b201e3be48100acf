// The device fp8 quantizers (quantize_device.hpp) against the host ones (quantize.hpp), bit for bit: codes and
// scales of 1×128 rows (with pitches and quantize.hpp's column-major scale layout) and of 128×128 weight blocks,
// over values spanning many binades, zero blocks, tiny blocks (scale 1 rule) and spikes. Part of
// xstage_moe_gpu_tests (one GPU per rank; every rank runs it on its own GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "moe/fp8/quantize.hpp"
#include "moe/fp8/quantize_device.hpp"

namespace xstage::moe {
namespace {

// bf16 bit patterns: log-uniform magnitudes 2^-20 .. 2^12, random signs; block b of every row gets a pattern:
// 0 all zero, 1 tiny (below 448·2^-126), 2 one spike, else plain.
std::vector<std::uint16_t> test_values(int rows, int cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> exponent(-20.0f, 12.0f);
  std::vector<std::uint16_t> v(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int kind = (c / 128 + r) % 5;
      float x = std::exp2(exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
      if (kind == 0) x = 0.0f;
      if (kind == 1) x = 1e-39f * static_cast<float>(rng() % 7);
      if (kind == 2 && c % 128 == 37) x = 30000.0f;
      std::uint32_t u;
      std::memcpy(&u, &x, 4);
      v[static_cast<std::size_t>(r) * cols + c] = static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
  return v;
}

TEST(Fp8QuantizeGpu, RowsMatchTheHostQuantizerBitForBit) {
  const int rows = 77, cols = 640, x_pitch = cols + 128, code_pitch = cols + 64, scale_pitch = (rows + 3) / 4 * 4;
  const auto x = test_values(rows, cols, 5);
  std::vector<std::uint16_t> x_pitched(static_cast<std::size_t>(rows) * x_pitch, 0);
  for (int r = 0; r < rows; ++r) std::memcpy(&x_pitched[static_cast<std::size_t>(r) * x_pitch], &x[static_cast<std::size_t>(r) * cols], cols * 2);
  DeviceBuffer dx(x_pitched.size() * 2), dcodes(static_cast<std::size_t>(rows) * code_pitch),
      dscales(static_cast<std::size_t>(cols / 128) * scale_pitch * 4);
  XSTAGE_CUDA_CHECK(cudaMemcpy(dx.get(), x_pitched.data(), dx.bytes(), cudaMemcpyHostToDevice));
  quantize_rows_fp8(dx.get<__nv_bfloat16>(), x_pitch, rows, cols, dcodes.get<std::uint8_t>(), code_pitch, dscales.get<float>(),
                    1, scale_pitch, nullptr);
  XSTAGE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint8_t> codes(dcodes.bytes());
  std::vector<float> scales(dscales.bytes() / 4);
  XSTAGE_CUDA_CHECK(cudaMemcpy(codes.data(), dcodes.get(), codes.size(), cudaMemcpyDeviceToHost));
  XSTAGE_CUDA_CHECK(cudaMemcpy(scales.data(), dscales.get(), dscales.bytes(), cudaMemcpyDeviceToHost));
  const Fp8Activations want = quantize_activations_bf16(x.data(), rows, cols);
  int code_diffs = 0, scale_diffs = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) code_diffs += codes[static_cast<std::size_t>(r) * code_pitch + c] != want.code(r, c);
  for (int r = 0; r < rows; ++r)
    for (int kb = 0; kb < cols / 128; ++kb) {
      const float expected = want.scale(r, kb);
      scale_diffs += std::memcmp(&scales[static_cast<std::size_t>(kb) * scale_pitch + r], &expected, 4) != 0;
    }
  EXPECT_EQ(code_diffs, 0);
  EXPECT_EQ(scale_diffs, 0);
}

TEST(Fp8QuantizeGpu, WeightsMatchTheHostQuantizerBitForBit) {
  const int n = 384, k = 640, pitch = (k / 128 + 3) / 4 * 4;
  const auto w = test_values(n, k, 9);
  std::vector<float> wf(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(w[i]) << 16;
    std::memcpy(&wf[i], &u, 4);
  }
  DeviceBuffer dw(w.size() * 2), dcodes(w.size()), dscales(static_cast<std::size_t>(n / 128) * pitch * 4);
  XSTAGE_CUDA_CHECK(cudaMemcpy(dw.get(), w.data(), dw.bytes(), cudaMemcpyHostToDevice));
  quantize_weights_fp8(dw.get<__nv_bfloat16>(), n, k, dcodes.get<std::uint8_t>(), dscales.get<float>(), nullptr);
  XSTAGE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint8_t> codes(dcodes.bytes());
  std::vector<float> scales(dscales.bytes() / 4);
  XSTAGE_CUDA_CHECK(cudaMemcpy(codes.data(), dcodes.get(), codes.size(), cudaMemcpyDeviceToHost));
  XSTAGE_CUDA_CHECK(cudaMemcpy(scales.data(), dscales.get(), dscales.bytes(), cudaMemcpyDeviceToHost));
  const Fp8Weights want = quantize_weights(wf.data(), n, k);
  EXPECT_EQ(codes, want.codes);
  ASSERT_EQ(scales.size(), want.scales.size());
  EXPECT_EQ(std::memcmp(scales.data(), want.scales.data(), scales.size() * 4), 0);  // padding 1.0f included
}

}  // namespace
}  // namespace xstage::moe
