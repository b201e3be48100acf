// fp8 W8A8 building blocks shared by the CPU reference and the kernels: the OCP FP8 E4M3FN
// format and the block-scale conventions. Header only, XSTAGE_HD, no CUDA headers.
//
// E4M3FN (OCP 8-bit floating point, "fn" = finite + NaN): S.EEEE.MMM, exponent bias 7.
//   E = 1..15:  (-1)^S · (1 + M/8) · 2^(E-7)      largest finite 0.1111.110 = 0x7E = 448
//   E = 0:      (-1)^S · (M/8) · 2^-6             subnormals, smallest 2^-9
//   S.1111.111  NaN (0x7F, 0xFF); there are no infinities.
//
// Encoding (e4m3_from_float): round to nearest, ties to even, SATURATING: every finite |x| > 448 and ±inf
// give ±448 (0x7E / 0xFE), never NaN; NaN gives 0x7F (sign dropped); |x| <= 2^-10 gives ±0 (sign kept).
// This is exactly CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) (cuda_fp8.hpp, its host
// emulation; on sm_89+ that is `cvt.rn.satfinite.e4m3x2.f32`). The host (and any scalar use) runs the bit
// manipulation below (it agrees with the CUDA 13.0 host emulation on all 2^32 float inputs, see docs/MOE.md);
// the device quantizers encode two values at a time with the cvt instruction (e4m3x2_from_float), which gives
// the same code for every non-NaN float32 (tests/gpu/moe_fp8_encoder_gpu_test.cu checks all 2^32 inputs on the
// GPU) and a NaN code for a NaN (the device quantizers take finite inputs only).
//
// Block scales (DeepGEMM / DeepSeek-V3 convention):
//   activations  one fp32 scale per (row, 128-column block)          ("1×128")
//   weights      one fp32 scale per (128-row, 128-column block)       ("128×128")
//   amax  = max |x| over the block;  scale = amax / 448 (fp32 division, round to nearest);
//   inv   = 448 / amax (fp32 division);  code = e4m3(x · inv) (one fp32 multiply, round to nearest);
//   dequantized value = e4m3_to_float(code) · scale.
// The block's largest element lands on ±448 (x·inv may exceed 448 by an ulp; saturation catches it).
// A zero block (amax = 0) gets scale = inv = 1: 448/0 would be inf and 0·inf = NaN codes, and scale 0 would
// put a 0 into the kernel's promotion (scale_a · scale_b) that hides nothing but breaks "scales are
// positive normal floats"; with scale 1 every code is ±0 and dequantizes to exactly 0. Blocks whose
// amax/448 would be subnormal (amax < 448·2^-126 ≈ 5.3e-36) are treated the same way (their codes are ±0,
// absolute error < 5.3e-36): so every stored scale is a positive normal float, safe under flush-to-zero.
// Non-finite amax (inf/NaN in the block) has no meaningful scale; host quantization rejects it.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.hpp"

namespace xstage::moe::fp8 {

inline constexpr float kE4m3Max = 448.0f;        // largest finite e4m3 value, code 0x7E
inline constexpr std::uint8_t kE4m3MaxCode = 0x7E;
inline constexpr std::uint8_t kE4m3NaN = 0x7F;   // canonical NaN the encoder produces
inline constexpr int kBlock = 128;               // scale block edge: 1×128 activations, 128×128 weights

// The weight-scale layout (quantize.hpp): [n/128][weight_scale_pitch(k)] fp32, each row of K blocks padded to a
// multiple of 4 floats (16 B), so that every row starts aligned for TMA and vector loads.
XSTAGE_HD constexpr std::int64_t weight_scale_pitch(std::int64_t k) { return (k / kBlock + 3) / 4 * 4; }

XSTAGE_HD inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

XSTAGE_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// float -> e4m3 code: round to nearest even, saturate finite overflow and ±inf to ±448, NaN -> 0x7F.
XSTAGE_HD inline std::uint8_t e4m3_from_float(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  if (a > 0x7F800000u) return kE4m3NaN;                                    // NaN
  if (a >= 0x43E00000u) return static_cast<std::uint8_t>(sign | kE4m3MaxCode);  // |x| >= 448 (incl. inf): saturate
  if (a >= 0x3C800000u) {                                                  // |x| >= 2^-6: e4m3 normal range
    // Keep 3 of the 23 mantissa bits, round to nearest even on the 20 dropped bits; a mantissa carry
    // moves into the exponent by itself. |x| < 448 rounds to at most 448 (no value lies in (448, 464)
    // here), so no overflow is possible.
    const std::uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;      // (fp32 exponent << 3) | mantissa
    return static_cast<std::uint8_t>(sign | (r - (120u << 3)));          // rebias 127 -> 7
  }
  // Subnormal range |x| < 2^-6: the code is round(|x| / 2^-9), an integer 0..8 (8 = 0x08 = 2^-6, the
  // smallest normal, so the carry is right by itself). |x| = 1.m · 2^e, significand m24 (24 bits with the
  // hidden bit) -> |x| / 2^-9 = m24 >> (14 - e), shift >= 21. fp32 subnormals (exponent field 0) and
  // anything below 2^-11 give 0 with the remainder below one half.
  const int e_field = static_cast<int>(a >> 23);
  if (e_field < 127 - 11) return sign;                                    // |x| < 2^-11: ±0
  const std::uint32_t m24 = (a & 0x7FFFFFu) | 0x800000u;
  const int shift = 14 - (e_field - 127);                                  // 21 .. 25
  std::uint32_t q = m24 >> shift;
  const std::uint32_t rem = m24 & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<std::uint8_t>(sign | q);
}

// e4m3 code -> float (exact: every e4m3 value is an fp32 value). S.1111.111 -> NaN.
XSTAGE_HD inline float e4m3_to_float(std::uint8_t c) {
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t e = (c >> 3) & 0xFu, m = c & 0x7u;
  if (e == 0xFu && m == 0x7u) return bits_float(sign | 0x7FC00000u);
  if (e == 0) return bits_float(sign | float_bits(static_cast<float>(m) * 0.001953125f));  // m · 2^-9
  return bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

// The scale pair of one block from its amax (see the header comment for the zero / tiny block rule).
struct BlockScale {
  float scale = 1.0f;  // dequantized value = e4m3_to_float(code) · scale
  float inv = 1.0f;    // code = e4m3_from_float(x · inv)
};

XSTAGE_HD inline BlockScale block_scale(float amax) {
  // amax < 448 · 2^-126 (including 0) -> scale 1; written with the multiply so NaN amax also lands in
  // the division branch (and produces NaN, which the host rejects before it gets here).
  if (amax < kE4m3Max * 1.1754943508222875e-38f) return BlockScale{1.0f, 1.0f};
  return BlockScale{amax / kE4m3Max, kE4m3Max / amax};
}

// One element: code = e4m3(x · inv). The kernel must use an IEEE round-to-nearest multiply here (no
// fast-math reciprocal tricks) and the IEEE divisions of block_scale to reproduce the codes exactly.
XSTAGE_HD inline std::uint8_t quantize_value(float x, const BlockScale& s) { return e4m3_from_float(x * s.inv); }

// Two codes at once: lo's in the low byte, hi's in the high byte. On the device one `cvt.rn.satfinite.e4m3x2.f32`
// (the bit manipulation took ~14 µs of a 128 × 256 Linear-1 epilogue of the fused kernel: docs/MOE.md), on the
// host e4m3_from_float twice; identical for every non-NaN input (see the header comment).
XSTAGE_HD inline std::uint16_t e4m3x2_from_float(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  std::uint16_t codes;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(codes) : "f"(hi), "f"(lo));  // first operand: upper byte
  return codes;
#else
  return static_cast<std::uint16_t>(e4m3_from_float(lo) | (e4m3_from_float(hi) << 8));
#endif
}

// Two elements of one block: code(x0) | code(x1) << 8, each e4m3(x · inv) with one IEEE fp32 multiply.
XSTAGE_HD inline std::uint16_t quantize_pair(float x0, float x1, const BlockScale& s) {
  return e4m3x2_from_float(x0 * s.inv, x1 * s.inv);
}

XSTAGE_HD inline float dequantize_value(std::uint8_t code, float scale) { return e4m3_to_float(code) * scale; }

}  // namespace xstage::moe::fp8
