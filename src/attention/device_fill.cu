#include "attention/device_fill.hpp"

#include <cuda_bf16.h>

#include <string>

#include "common/cuda_check.hpp"
#include "common/device_clock.cuh"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/grid_dependency.cuh"
#include "common/launch.cuh"

namespace xstage::attention {
namespace {

__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* dst, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = splitmix64(seed * 0x100000001B3ull + uint64_t(i));
    const float u = float(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    dst[i] = __float2bfloat16(lo + (hi - lo) * u);
  }
}

template <class T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

struct LateCopies {
  int count = 0;
  uint16_t* dst[kMaxLateCopies] = {};
  const uint16_t* src[kMaxLateCopies] = {};
  int64_t words[kMaxLateCopies] = {};
};

// One CTA per SM, all resident at once, so that each lets the next kernel start before any of them writes.
__global__ void copy_u16_late_kernel(LateCopies c, uint64_t delay_ns) {
  allow_dependent_grids();
  const uint64_t t0 = global_timer_ns();
  while (global_timer_ns() - t0 < delay_ns) {
  }
  for (int k = 0; k < c.count; ++k)
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < c.words[k]; i += int64_t(gridDim.x) * blockDim.x)
      c.dst[k][i] = c.src[k][i];
}

__global__ void count_differing_u16_kernel(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) local += a[i] != b[i];
  if (local) atomicAdd(count, local);
}

int grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return int(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192);
}

}  // namespace

void fill_uniform_bf16(void* dst, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  launch_kernel(fill_uniform_bf16_kernel, grid_for(n), 256, 0, stream, static_cast<__nv_bfloat16*>(dst), n, seed, lo, hi);
}

void fill_u16(void* dst, int64_t n, uint16_t bits, cudaStream_t stream) {
  launch_kernel(fill_kernel<uint16_t>, grid_for(n), 256, 0, stream, static_cast<uint16_t*>(dst), n, bits);
}

void fill_f32(float* dst, int64_t n, float value, cudaStream_t stream) {
  launch_kernel(fill_kernel<float>, grid_for(n), 256, 0, stream, dst, n, value);
}

void copy_u16_late(const std::vector<LateCopy>& copies, int delay_us, cudaStream_t stream) {
  XSTAGE_REQUIRE(copies.size() <= kMaxLateCopies, "copy_u16_late: at most " + std::to_string(kMaxLateCopies) + " copies per kernel");
  LateCopies c;
  for (const LateCopy& x : copies) {
    c.dst[c.count] = static_cast<uint16_t*>(x.dst);
    c.src[c.count] = static_cast<const uint16_t*>(x.src);
    c.words[c.count++] = x.words;
  }
  launch_kernel(copy_u16_late_kernel, current_device_facts().sm_count, 256, 0, stream, c, uint64_t(delay_us) * 1000u);
}

void count_differing_u16(const void* a, const void* b, int64_t n, unsigned long long* count, cudaStream_t stream) {
  launch_kernel(count_differing_u16_kernel, grid_for(n), 256, 0, stream, static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n,
                count);
}

}  // namespace xstage::attention
