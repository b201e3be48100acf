// Device-side fills for checks and benchmarks: reproducible random bf16 data and poison patterns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace xstage::attention {

// Fills n bf16 values with uniform random numbers in [lo, hi), from a counter-based hash of (seed, index).
void fill_uniform_bf16(void* dst, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream = nullptr);

// Fills n 16-bit words with `bits` (0xFFFF is a bf16 NaN: poison for outputs that must be overwritten).
void fill_u16(void* dst, int64_t n, uint16_t bits, cudaStream_t stream = nullptr);

// Fills n floats with `value`.
void fill_f32(float* dst, int64_t n, float value, cudaStream_t stream = nullptr);

// Copies of 16-bit words, src -> dst, `words` each, in one kernel that lets the next kernel start at once and writes
// only after `delay_us` (common/grid_dependency.cuh): a later kernel launched to start early that read a dst before
// waiting for the kernels before it would read the old words. The checks' probe of that wait.
struct LateCopy {
  void* dst;
  const void* src;
  int64_t words;
};
constexpr int kMaxLateCopies = 32;
void copy_u16_late(const std::vector<LateCopy>& copies, int delay_us, cudaStream_t stream = nullptr);

// Adds to *count (device) the number of 16-bit words in which a[0..n) and b[0..n) differ, bit for bit.
void count_differing_u16(const void* a, const void* b, int64_t n, unsigned long long* count, cudaStream_t stream = nullptr);

}  // namespace xstage::attention
