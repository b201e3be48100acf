// fp8 E4M3 encode/decode (every code, every rounding boundary, saturation) and the block-scale quantization
// (round-trip bounds, zero blocks, scale layouts, block-scaled GEMM with fp32 promotion).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/error.hpp"
#include "moe/fp8/fp8.hpp"
#include "moe/fp8/quantize.hpp"

namespace xstage::moe {
namespace {

using fp8::e4m3_from_float;
using fp8::e4m3_to_float;

// Independent decode from the format definition (ldexp, no bit tricks). NaN for S.1111.111.
double reference_decode(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// Independent encoder: nearest of the 127 non-negative finite codes by exhaustive search, ties to the even
// code, saturating at 448; NaN -> 0x7F.
std::uint8_t reference_encode(float x) {
  if (std::isnan(x)) return 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(reference_decode(c) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return static_cast<std::uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8E4m3, EveryCodeDecodesAsTheFormatSaysAndRoundTrips) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<std::uint8_t>(c));
    const double want = reference_decode(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), want) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 128) << "code " << c;
    EXPECT_EQ(e4m3_from_float(v), c) << "code " << c;  // every finite value encodes to its own code (±0 too)
    EXPECT_EQ(reference_encode(v), c) << "code " << c;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only: no infinities in E4M3FN
  for (int c = 0; c < 0x7E; ++c) EXPECT_LT(e4m3_to_float(static_cast<std::uint8_t>(c)), e4m3_to_float(static_cast<std::uint8_t>(c + 1)));
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
}

TEST(Fp8E4m3, RoundingBoundariesAreNearestEven) {
  // Between every pair of adjacent non-negative codes: the midpoint (exact in fp32) goes to the even code,
  // one fp32 ulp either side goes to the nearer code; mirrored for negative values.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_to_float(static_cast<std::uint8_t>(c)), hi = e4m3_to_float(static_cast<std::uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    ASSERT_EQ(static_cast<double>(mid), 0.5 * (static_cast<double>(lo) + hi));
    const int even = (c & 1) ? c + 1 : c;
    for (float sgn : {1.0f, -1.0f}) {
      const int s = sgn < 0 ? 0x80 : 0;
      EXPECT_EQ(e4m3_from_float(sgn * mid), even | s) << "midpoint of codes " << c << ", " << c + 1;
      EXPECT_EQ(e4m3_from_float(sgn * std::nextafter(mid, 1e9f)), (c + 1) | s) << "above midpoint " << c;
      EXPECT_EQ(e4m3_from_float(sgn * std::nextafter(mid, 0.0f)), c | s) << "below midpoint " << c;
    }
  }
}

TEST(Fp8E4m3, AgreesWithAnExhaustiveNearestSearchOnRandomFloats) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> log2mag(-14.0, 11.0);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    float x;
    if (i % 2) {
      x = static_cast<float>(std::exp2(log2mag(rng))) * ((rng() & 1) ? -1.0f : 1.0f);
    } else {
      const std::uint32_t u = static_cast<std::uint32_t>(rng());  // any bit pattern: tiny, huge, NaN, inf
      x = fp8::bits_float(u);
    }
    ASSERT_EQ(e4m3_from_float(x), reference_encode(x)) << "x = " << x << " bits " << std::hex << fp8::float_bits(x);
    ++checked;
  }
  EXPECT_EQ(checked, 200000);
}

TEST(Fp8E4m3, SaturatesToMaxAndHandlesSpecials) {
  for (float x : {448.0f, 449.0f, 463.99f, 464.0f, 465.0f, 480.0f, 1e6f, FLT_MAX, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(e4m3_from_float(x), 0x7E) << x;
    EXPECT_EQ(e4m3_from_float(-x), 0xFE) << -x;
  }
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: tie to even 0
  EXPECT_EQ(e4m3_from_float(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(e4m3_from_float(-std::ldexp(1.5f, -10)), 0x81);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(e4m3_from_float(std::ldexp(7.5f, -9)), 0x08);  // subnormal 7.5 ulp rounds (even) up to the min normal
  EXPECT_EQ(e4m3_from_float(416.0f + 16.0f), 0x7E);          // 432 = midpoint 416 | 448 -> even 448 (0x7E)
}

TEST(Fp8Scales, BlockScaleRules) {
  EXPECT_EQ(fp8::block_scale(0.0f).scale, 1.0f);
  EXPECT_EQ(fp8::block_scale(0.0f).inv, 1.0f);
  EXPECT_EQ(fp8::block_scale(1e-37f).scale, 1.0f);  // amax/448 would be subnormal: treated as a zero block
  EXPECT_EQ(fp8::block_scale(448.0f).scale, 1.0f);
  EXPECT_EQ(fp8::block_scale(1.0f).scale, 1.0f / 448.0f);
  EXPECT_EQ(fp8::block_scale(1.0f).inv, 448.0f);
  for (float amax : {1e-30f, 3.7e-3f, 1.0f, 12345.0f, 3e38f}) {
    const fp8::BlockScale s = fp8::block_scale(amax);
    EXPECT_GE(s.scale, FLT_MIN);
    EXPECT_EQ(fp8::quantize_value(amax, s), 0x7E) << amax;   // the block max lands on 448
    EXPECT_EQ(fp8::quantize_value(-amax, s), 0xFE) << amax;
    EXPECT_NEAR(fp8::dequantize_value(0x7E, s.scale), amax, 1e-6 * amax);
  }
}

// e4m3 spacing at |y| (y = the scaled value before rounding).
double e4m3_ulp(double y) {
  if (y < std::ldexp(1.0, -6)) return std::ldexp(1.0, -9);
  return std::ldexp(1.0, std::min(static_cast<int>(std::floor(std::log2(y))), 8) - 3);
}

// Elements violating |x - dq(q(x))| <= ulp(x/scale)/2 · scale (plus 2^-21·|x| for the three fp32 roundings
// of inv, x·inv and the dequantizing multiply). `amax_of(i)` gives the amax of element i's block.
template <class AmaxOf>
int roundtrip_violations(const std::vector<float>& x, const std::vector<float>& dq, const std::vector<float>& scale_of,
                         AmaxOf amax_of, double* max_rel_of_block = nullptr) {
  int bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double s = scale_of[i], y = std::fabs(x[i]) * 448.0 / std::max(amax_of(i), 1e-300);
    const double err = std::fabs(static_cast<double>(x[i]) - dq[i]);
    const double bound = amax_of(i) == 0 ? 0.0 : 0.5 * e4m3_ulp(y) * s + std::ldexp(std::fabs(x[i]), -21);
    if (err > bound) ++bad;
    if (amax_of(i) > 0) worst = std::max(worst, err / amax_of(i));
  }
  if (max_rel_of_block) *max_rel_of_block = worst;
  return bad;
}

// A [rows][cols] matrix whose 128-column blocks have magnitudes 2^-20 .. 2^20, with a zero block, a block of
// one spike, and negative zeros.
std::vector<float> varied_matrix(int rows, int cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int kb = 0; kb < cols / 128; ++kb) {
      const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 41) - 20);
      const int kind = (r * 7 + kb) % 9;
      for (int c = 0; c < 128; ++c) {
        float v = mag * nd(rng);
        if (kind == 0) v = (c % 2) ? 0.0f : -0.0f;                 // zero block
        if (kind == 1) v = c == 5 ? 1000.0f * mag : 1e-3f * v;     // one spike, the rest tiny (subnormal codes)
        x[static_cast<std::size_t>(r) * cols + kb * 128 + c] = v;
      }
    }
  return x;
}

TEST(Fp8Quantize, ActivationsRoundTripWithinHalfAnUlpOfTheScaledValue) {
  const int rows = 37, cols = 384;
  const std::vector<float> x = varied_matrix(rows, cols, 11);
  const Fp8Activations a = quantize_activations(x.data(), rows, cols);
  ASSERT_EQ(a.scale_pitch, 40);
  ASSERT_EQ(a.scales.size(), 3u * 40u);
  const std::vector<float> dq = dequantize(a);
  std::vector<float> scale_of(x.size()), amax(static_cast<std::size_t>(rows) * 3, 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * cols + c;
      scale_of[i] = a.scale(r, c / 128);
      amax[static_cast<std::size_t>(r) * 3 + c / 128] = std::max(amax[static_cast<std::size_t>(r) * 3 + c / 128], std::fabs(x[i]));
    }
  const auto amax_of = [&](std::size_t i) { return static_cast<double>(amax[i / cols * 3 + i % cols / 128]); };
  double worst = 0;
  EXPECT_EQ(roundtrip_violations(x, dq, scale_of, amax_of, &worst), 0);
  EXPECT_LE(worst, 1.0 / 28 + 1e-6);  // at most half an ulp at 448 (16) / 448 of the block's amax
  // Zero blocks: scale 1, codes ±0, dequantized exactly 0. Spike blocks: the spike is ±448.
  for (int r = 0; r < rows; ++r)
    for (int kb = 0; kb < 3; ++kb) {
      if ((r * 7 + kb) % 9 == 0) {
        EXPECT_EQ(a.scale(r, kb), 1.0f);
        for (int c = 0; c < 128; ++c) EXPECT_EQ(a.code(r, kb * 128 + c) & 0x7F, 0);
      }
      if ((r * 7 + kb) % 9 == 1) EXPECT_EQ(a.code(r, kb * 128 + 5), 0x7E);
    }
  // Padding of the column-major scale tensor holds 1.
  for (int kb = 0; kb < 3; ++kb)
    for (int r = rows; r < a.scale_pitch; ++r) EXPECT_EQ(a.scales[static_cast<std::size_t>(kb) * a.scale_pitch + r], 1.0f);

  // A corrupted scale (one block's scale off by 1/16) breaks the bound: the check can fail.
  Fp8Activations bad = a;
  bad.scale(3, 1) *= 1.0625f;
  const std::vector<float> dq_bad = dequantize(bad);
  EXPECT_GT(roundtrip_violations(x, dq_bad, scale_of, amax_of), 0);
}

TEST(Fp8Quantize, ActivationScalesAreColumnMajorAndBf16InputMatches) {
  const int rows = 5, cols = 256;
  std::vector<float> x(static_cast<std::size_t>(rows) * cols, 0.25f);
  for (int r = 0; r < rows; ++r)
    for (int kb = 0; kb < 2; ++kb) x[static_cast<std::size_t>(r) * cols + kb * 128 + 3] = static_cast<float>(1 + r + 10 * kb);
  const Fp8Activations a = quantize_activations(x.data(), rows, cols);
  ASSERT_EQ(a.scale_pitch, 8);
  for (int r = 0; r < rows; ++r)
    for (int kb = 0; kb < 2; ++kb) EXPECT_EQ(a.scales[static_cast<std::size_t>(kb) * 8 + r], static_cast<float>(1 + r + 10 * kb) / 448.0f);
  std::vector<std::uint16_t> bf(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) bf[i] = static_cast<std::uint16_t>(fp8::float_bits(x[i]) >> 16);  // exact: bf16 values
  const Fp8Activations b = quantize_activations_bf16(bf.data(), rows, cols);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_THROW(quantize_activations(x.data(), rows, 200), InputError);
  x[7] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize_activations(x.data(), rows, cols), InputError);
}

TEST(Fp8Quantize, WeightsRoundTripPer128x128BlockWithRowMajorScales) {
  const int n = 256, k = 384;
  std::vector<float> w = varied_matrix(n, k, 12);
  // Make every 128×128 block's amax distinct and known: put it at the block's first element.
  for (int nb = 0; nb < 2; ++nb)
    for (int kb = 0; kb < 3; ++kb) {
      float amax = 0;
      for (int r = 0; r < 128; ++r)
        for (int c = 0; c < 128; ++c) amax = std::max(amax, std::fabs(w[static_cast<std::size_t>(nb * 128 + r) * k + kb * 128 + c]));
      w[static_cast<std::size_t>(nb * 128) * k + kb * 128] = 2.0f * amax + static_cast<float>(nb * 3 + kb + 1);
    }
  const Fp8Weights q = quantize_weights(w.data(), n, k);
  ASSERT_EQ(q.scale_pitch, 4);
  for (int nb = 0; nb < 2; ++nb) {
    for (int kb = 0; kb < 3; ++kb)
      EXPECT_EQ(q.scales[static_cast<std::size_t>(nb) * 4 + kb], w[static_cast<std::size_t>(nb * 128) * k + kb * 128] / 448.0f);
    EXPECT_EQ(q.scales[static_cast<std::size_t>(nb) * 4 + 3], 1.0f);  // padding
  }
  const std::vector<float> dq = dequantize(q);
  std::vector<float> scale_of(w.size());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) scale_of[static_cast<std::size_t>(r) * k + c] = q.scale(r / 128, c / 128);
  const auto amax_of = [&](std::size_t i) {
    const int r = static_cast<int>(i / k), c = static_cast<int>(i % k);
    return static_cast<double>(w[static_cast<std::size_t>(r / 128 * 128) * k + c / 128 * 128]);
  };
  EXPECT_EQ(roundtrip_violations(w, dq, scale_of, amax_of), 0);
  Fp8Weights bad = q;
  bad.scale(1, 2) *= 0.9375f;
  EXPECT_GT(roundtrip_violations(w, dequantize(bad), scale_of, amax_of), 0);
  EXPECT_THROW(quantize_weights(w.data(), 100, k), InputError);
}

// C = A·Wᵀ in float64 from the unquantized values.
std::vector<double> exact_gemm(const std::vector<float>& a, const std::vector<float>& w, int m, int n, int k) {
  std::vector<double> c(static_cast<std::size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int t = 0; t < k; ++t) acc += static_cast<double>(a[static_cast<std::size_t>(i) * k + t]) * w[static_cast<std::size_t>(j) * k + t];
      c[static_cast<std::size_t>(i) * n + j] = acc;
    }
  return c;
}

TEST(Fp8Gemm, BlockPromotionEqualsDequantizedProductAndStaysWithinTheQuantizationBound) {
  const int m = 19, n = 256, k = 384;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(m) * k), w(static_cast<std::size_t>(n) * k);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = nd(rng) * ((i / 128) % 3 == 0 ? 10.0f : 1.0f);  // blocks of different size
  for (float& v : w) v = 0.05f * nd(rng);
  const Fp8Activations aq = quantize_activations(a.data(), m, k);
  const Fp8Weights wq = quantize_weights(w.data(), n, k);
  const std::vector<float> ad = dequantize(aq), wd = dequantize(wq);
  const std::vector<double> c = fp8_block_gemm(aq, wq), c_dq = exact_gemm(ad, wd, m, n, k), c_exact = exact_gemm(a, w, m, n, k);

  // Per-element quantization bounds (half an ulp of the scaled value, as in the round-trip test).
  const auto elem_bound = [](float x, float dqx) { return std::fabs(static_cast<double>(x) - dqx); };
  double worst_rel_to_bound = 0, num = 0, den = 0;
  int over = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double abs_sum = 0, bound = 0;
      for (int t = 0; t < k; ++t) {
        const float x = a[static_cast<std::size_t>(i) * k + t], y = w[static_cast<std::size_t>(j) * k + t];
        const float xd = ad[static_cast<std::size_t>(i) * k + t], yd = wd[static_cast<std::size_t>(j) * k + t];
        abs_sum += std::fabs(static_cast<double>(xd) * yd);
        bound += std::fabs(x) * elem_bound(y, yd) + std::fabs(yd) * elem_bound(x, xd);  // |xy - x̂ŷ| <= |x||y-ŷ| + |ŷ||x-x̂|
      }
      const std::size_t o = static_cast<std::size_t>(i) * n + j;
      // Promotion vs dequantize-then-multiply: only fp32 roundings differ (scale product vs each dq value).
      EXPECT_LE(std::fabs(c[o] - c_dq[o]), 1e-6 * abs_sum) << i << "," << j;
      if (std::fabs(c[o] - c_exact[o]) > bound * (1 + 1e-6) + 1e-6 * abs_sum) ++over;
      worst_rel_to_bound = std::max(worst_rel_to_bound, std::fabs(c[o] - c_exact[o]) / bound);
      num += (c[o] - c_exact[o]) * (c[o] - c_exact[o]);
      den += c_exact[o] * c_exact[o];
    }
  EXPECT_EQ(over, 0);
  const double rel_l2 = std::sqrt(num / den);
  std::printf("fp8 block GEMM vs exact: rel L2 %.4f\n", rel_l2);
  EXPECT_LT(rel_l2, 0.05);  // two e4m3 operands, each ≈ 2.5% rms relative rounding: ≈ 3.5%

  // A corrupted activation scale (×2) or weight scale (×2) puts outputs outside the rigorous bound.
  for (int which = 0; which < 2; ++which) {
    Fp8Activations ab = aq;
    Fp8Weights wb = wq;
    if (which == 0) ab.scale(4, 0) *= 2.0f;  // block 0 carries the large activations (×10)
    else wb.scale(1, 0) *= 2.0f;
    const std::vector<double> cb = fp8_block_gemm(ab, wb);
    int violations = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double bound = 0;
        for (int t = 0; t < k; ++t) {
          const float x = a[static_cast<std::size_t>(i) * k + t], y = w[static_cast<std::size_t>(j) * k + t];
          const float xd = ad[static_cast<std::size_t>(i) * k + t], yd = wd[static_cast<std::size_t>(j) * k + t];
          bound += std::fabs(x) * elem_bound(y, yd) + std::fabs(yd) * elem_bound(x, xd);
        }
        const std::size_t o = static_cast<std::size_t>(i) * n + j;
        if (std::fabs(cb[o] - c_exact[o]) > bound * (1 + 1e-6)) ++violations;
      }
    EXPECT_GT(violations, 10) << (which == 0 ? "activation" : "weight") << " scale corruption went unnoticed";
  }
  EXPECT_THROW(fp8_block_gemm(aq, quantize_weights(w.data(), n, 256)), InputError);
}

}  // namespace
}  // namespace xstage::moe
