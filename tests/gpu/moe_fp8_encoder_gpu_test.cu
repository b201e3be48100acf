// The device quantizers' e4m3 encoder (fp8::e4m3x2_from_float: one `cvt.rn.satfinite.e4m3x2.f32` per two values)
// against the bit manipulation the host runs (fp8::e4m3_from_float) on every one of the 2^32 float32 bit patterns,
// each once as the low and once as the high value of a pair: the same code for every non-NaN input, a NaN code
// (S.1111.111) for every NaN. Part of xstage_moe_gpu_tests.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "moe/fp8/fp8.hpp"

namespace xstage::moe {
namespace {

// counts[0]: non-NaN inputs whose code differs; counts[1]: NaN inputs whose code is not a NaN code.
__global__ void compare_all_inputs(unsigned long long* counts) {
  unsigned long long finite_bad = 0, nan_bad = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const float x = __uint_as_float(static_cast<std::uint32_t>(i));
    const float y = __uint_as_float(static_cast<std::uint32_t>(~i));  // a different partner in the other byte
    const std::uint16_t pair = fp8::e4m3x2_from_float(x, y), swapped = fp8::e4m3x2_from_float(y, x);
    const std::uint8_t want = fp8::e4m3_from_float(x);
    const std::uint8_t lo = pair & 0xFF, hi = swapped >> 8;
    if (x != x) {
      nan_bad += ((lo & 0x7F) != 0x7F) + ((hi & 0x7F) != 0x7F);
    } else {
      finite_bad += (lo != want) + (hi != want);
    }
  }
  atomicAdd(&counts[0], finite_bad);
  atomicAdd(&counts[1], nan_bad);
}

TEST(Fp8EncoderGpu, CvtInstructionEqualsTheHostEncoderOnEveryFloat) {
  DeviceBuffer counts(2 * sizeof(unsigned long long));
  XSTAGE_CUDA_CHECK(cudaMemset(counts.get(), 0, counts.bytes()));
  compare_all_inputs<<<1024, 256>>>(counts.get<unsigned long long>());
  XSTAGE_CUDA_CHECK(cudaGetLastError());
  unsigned long long host[2] = {~0ull, ~0ull};
  XSTAGE_CUDA_CHECK(cudaMemcpy(host, counts.get(), sizeof host, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host[0], 0u) << "non-NaN float32 inputs whose device code differs from e4m3_from_float";
  EXPECT_EQ(host[1], 0u) << "NaN inputs that did not give a NaN code";
}

}  // namespace
}  // namespace xstage::moe
