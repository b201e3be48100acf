// One 128-value fp8 block per warp, 4 values per lane (lane l holds block elements 4l .. 4l+3): the unit of
// every 1×128 quantization on the device (quantize_device.cu's token rows, the unfused layer's SwiGLU
// output). The rules are fp8.hpp's, so the codes and scales equal the host quantizers' bit for bit.
#pragma once

#include <cstdint>

#include "moe/fp8/fp8.hpp"

namespace xstage::moe {

// The block's scale pair from each lane's 4 values: amax over the warp (max is exact, so the shuffle order
// cannot change it), then fp8::block_scale. All 32 lanes must call it.
__device__ __forceinline__ fp8::BlockScale warp_block_scale(const float (&v)[4]) {
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  return fp8::block_scale(amax);
}

// The lane's 4 codes, element 0 in the lowest byte (little-endian: one 4-byte store writes them in order).
__device__ __forceinline__ std::uint32_t quantize4(const float (&v)[4], const fp8::BlockScale& s) {
  return static_cast<std::uint32_t>(fp8::quantize_pair(v[0], v[1], s)) |
         static_cast<std::uint32_t>(fp8::quantize_pair(v[2], v[3], s)) << 16;
}

}  // namespace xstage::moe
