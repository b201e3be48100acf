#include "moe/fp8/quantize_device.hpp"

#include <string>

#include "common/cuda_check.hpp"
#include "common/error.hpp"
#include "moe/fp8/fp8_warp.cuh"
#include "common/launch.cuh"

namespace xstage::moe {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kWeightThreads = 256;  // one CTA per 128×128 block: 2 threads per row, 64 columns each

bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// One warp per (row, 128-column block): an 8-byte load of 4 bf16 per lane (a 256-byte coalesced row piece),
// the warp amax, 4 codes stored as one word, the scale by lane 0.
__global__ void quantize_rows_kernel(const __nv_bfloat16* x, std::int64_t x_pitch, std::int64_t blocks_total, int k_blocks,
                                     std::uint8_t* codes, std::int64_t code_pitch, float* scales,
                                     std::int64_t scale_row_stride, std::int64_t scale_block_stride) {
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (warp >= blocks_total) return;  // whole warps leave together: the shuffles below see all 32 lanes
  const int lane = threadIdx.x % 32;
  const std::int64_t r = warp / k_blocks;
  const int kb = static_cast<int>(warp % k_blocks);
  const int col = kb * fp8::kBlock + 4 * lane;
  const uint2 raw = *reinterpret_cast<const uint2*>(x + r * x_pitch + col);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  const float v[4] = {lo.x, lo.y, hi.x, hi.y};
  const fp8::BlockScale s = warp_block_scale(v);
  *reinterpret_cast<std::uint32_t*>(codes + r * code_pitch + col) = quantize4(v, s);
  if (lane == 0) scales[r * scale_row_stride + kb * scale_block_stride] = s.scale;
}

// One CTA per 128×128 block (blockIdx.x = n-block, blockIdx.y = k-block): amax over the block, then every
// value quantized with the block's scale (the second read mostly hits L2). The CTA of k-block 0 also writes
// its row's padding scales.
__global__ void quantize_weights_kernel(const __nv_bfloat16* w, int k, int scale_pitch, std::uint8_t* codes, float* scales) {
  __shared__ float warp_max[kWeightThreads / 32];
  __shared__ fp8::BlockScale block;
  const int nb = blockIdx.x, kb = blockIdx.y;
  const std::int64_t row = static_cast<std::int64_t>(nb) * fp8::kBlock + threadIdx.x / 2;
  const int col0 = kb * fp8::kBlock + (threadIdx.x % 2) * 64;
  const uint4* src = reinterpret_cast<const uint4*>(w + row * k + col0);  // 8 × 8 bf16
  float amax = 0.0f;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const uint4 u = src[q];
    const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h2[i]);
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = warp_max[0];
    for (int i = 1; i < kWeightThreads / 32; ++i) m = fmaxf(m, warp_max[i]);
    block = fp8::block_scale(m);
    scales[static_cast<std::int64_t>(nb) * scale_pitch + kb] = block.scale;
    if (kb == 0)
      for (int j = gridDim.y; j < scale_pitch; ++j) scales[static_cast<std::int64_t>(nb) * scale_pitch + j] = 1.0f;
  }
  __syncthreads();
  const fp8::BlockScale s = block;
  uint2* dst = reinterpret_cast<uint2*>(codes + row * k + col0);  // 8 × 8 codes
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const uint4 u = src[q];
    const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&u);
    std::uint32_t word[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h2[i]);
      word[i / 2] |= static_cast<std::uint32_t>(fp8::quantize_pair(f.x, f.y, s)) << (16 * (i % 2));
    }
    dst[q] = make_uint2(word[0], word[1]);
  }
}

}  // namespace

void quantize_rows_fp8(const __nv_bfloat16* x, std::int64_t x_pitch, int rows, int cols, std::uint8_t* codes,
                       std::int64_t code_pitch, float* scales, std::int64_t scale_row_stride,
                       std::int64_t scale_block_stride, cudaStream_t stream) {
  const std::string where = "quantize_rows_fp8: ";
  XSTAGE_REQUIRE(rows >= 0, where + "rows = " + std::to_string(rows) + " must be >= 0");
  XSTAGE_REQUIRE(cols > 0 && cols % fp8::kBlock == 0,
                 where + "cols = " + std::to_string(cols) + " must be a positive multiple of 128 (the fp8 scale block)");
  XSTAGE_REQUIRE(x_pitch >= cols && x_pitch % 4 == 0 && aligned(x, 8),
                 where + "x must be 8-byte aligned with a pitch >= cols that is a multiple of 4 elements (got pitch " +
                     std::to_string(x_pitch) + ")");
  XSTAGE_REQUIRE(code_pitch >= cols && code_pitch % 4 == 0 && aligned(codes, 4),
                 where + "codes must be 4-byte aligned with a pitch >= cols that is a multiple of 4 bytes (got pitch " +
                     std::to_string(code_pitch) + ")");
  if (rows == 0) return;
  const int k_blocks = cols / fp8::kBlock;
  const std::int64_t blocks_total = static_cast<std::int64_t>(rows) * k_blocks;
  const std::int64_t grid = (blocks_total + kWarpsPerBlock - 1) / kWarpsPerBlock;
  XSTAGE_REQUIRE(grid <= 0x7FFFFFFF, where + std::to_string(rows) + " rows x " + std::to_string(cols) + " columns is too many");
  launch_kernel(quantize_rows_kernel, static_cast<unsigned>(grid), kWarpsPerBlock * 32, 0, stream, x, x_pitch, blocks_total, k_blocks, codes, code_pitch, scales, scale_row_stride, scale_block_stride);
}

void quantize_weights_fp8(const __nv_bfloat16* w, int n, int k, std::uint8_t* codes, float* scales, cudaStream_t stream) {
  const std::string where = "quantize_weights_fp8: ";
  XSTAGE_REQUIRE(n > 0 && n % fp8::kBlock == 0 && k > 0 && k % fp8::kBlock == 0,
                 where + "n = " + std::to_string(n) + " and k = " + std::to_string(k) +
                     " must be positive multiples of 128 (the fp8 scale block)");
  XSTAGE_REQUIRE(k / fp8::kBlock <= 65535, where + "k = " + std::to_string(k) + " has more than 65535 blocks");
  XSTAGE_REQUIRE(aligned(w, 16) && aligned(codes, 8), where + "w must be 16-byte and codes 8-byte aligned");
  const int scale_pitch = static_cast<int>(fp8::weight_scale_pitch(k));
  launch_kernel(quantize_weights_kernel, dim3(n / fp8::kBlock, k / fp8::kBlock), kWeightThreads, 0, stream, w, k, scale_pitch, codes,
                                                                                                 scales);
}

}  // namespace xstage::moe
