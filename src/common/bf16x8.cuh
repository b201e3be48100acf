// Eight bf16 values in one 16-byte word: the unit of the top-k weighted sum that ends both MoE layers
// (unfused.cu and the fused kernel), accumulated in fp32 in a fixed order.
#pragma once

#include <cuda_bf16.h>

namespace xstage::moe {

// sum[i] += w · x[i] for the 8 bf16 values of `x`.
__device__ __forceinline__ void accumulate_bf16x8(float (&sum)[8], float w, uint4 x) {
  const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __bfloat1622float2(h2[q]);
    sum[2 * q] += w * f.x;
    sum[2 * q + 1] += w * f.y;
  }
}

// The 8 sums rounded to bf16 (round to nearest even).
__device__ __forceinline__ uint4 pack_bf16x8(const float (&sum)[8]) {
  uint4 out;
  __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int q = 0; q < 4; ++q) o2[q] = __floats2bfloat162_rn(sum[2 * q], sum[2 * q + 1]);
  return out;
}

}  // namespace xstage::moe
