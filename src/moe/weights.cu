#include "moe/weights.hpp"

#include <string>

#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/launch.cuh"
#include "moe/problem/layout.hpp"

namespace xstage::moe {
namespace {

// One 16-byte piece of one packed row per thread.
__global__ void pack_w1_kernel(const uint4* logical, uint4* packed, int E_local, int rows, int pieces, int b_n, int h_inter) {
  const std::int64_t n = static_cast<std::int64_t>(E_local) * rows * pieces;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int piece = static_cast<int>(i % pieces);
    const std::int64_t r = i / pieces;
    const int e = static_cast<int>(r / rows), sr = static_cast<int>(r % rows);
    const int lr = l1_logical_row(sr / b_n, sr % b_n, b_n, h_inter);
    packed[i] = logical[(static_cast<std::int64_t>(e) * rows + lr) * pieces + piece];
  }
}

}  // namespace

void pack_w1(const __nv_bfloat16* logical, __nv_bfloat16* packed, int E_local, int h, int I, int b_n, cudaStream_t stream) {
  XSTAGE_REQUIRE(E_local >= 1 && h >= 8 && h % 8 == 0 && I >= 1 && (2 * I) % b_n == 0 && (b_n == 128 || b_n == 256),
                 "pack_w1: needs E_local >= 1, h a multiple of 8 and 2·h_inter a multiple of b_n (128 or 256); got E_local = " +
                     std::to_string(E_local) + ", h = " + std::to_string(h) + ", h_inter = " + std::to_string(I) + ", b_n = " +
                     std::to_string(b_n));
  XSTAGE_REQUIRE(logical != nullptr && packed != nullptr && logical != packed, "pack_w1: needs two distinct device buffers");
  launch_kernel(pack_w1_kernel, current_device_facts().sm_count * 8, 256, 0, stream, reinterpret_cast<const uint4*>(logical), reinterpret_cast<uint4*>(packed),
                E_local, 2 * I, h / 8, b_n, I);
}

}  // namespace xstage::moe
