// The split tail's combine kernel and workspace (key_split_combine.hpp).
#include "attention/key_split_combine.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/grid_dependency.cuh"
#include "common/launch.cuh"

namespace xstage::attention {
namespace {

constexpr int kCombineThreads = 256;
constexpr int kColumnsPerThread = 8;  // one 16-byte bf16 store
constexpr int kBatchedParts = 4;      // a tile's parts loaded at once (most tiles have 2-4)

// Tail tile blockIdx.x, rows from blockIdx.y · (kCombineThreads / pieces): one row's eight columns a thread,
// lse = log Σ_k exp(lse_k) over the tile's parts (in CTA order) and O = Σ_k exp(lse_k − lse) O_k. One item a thread,
// so that the grid holds every load at once (a CTA per tile walking its rows took tens of µs, latency-bound).
__global__ void __launch_bounds__(kCombineThreads) key_split_combine_kernel(KeySplitCombine c) {
  wait_for_prior_grids();
  const int j = static_cast<int>(blockIdx.x);
  const int pieces = c.head_dim / kColumnsPerThread;
  const int idx = static_cast<int>(blockIdx.y * kCombineThreads + threadIdx.x);
  const int r = idx / pieces, col = idx % pieces * kColumnsPerThread;
  const TileCoord t = c.scheduler.coord(c.split.whole_tiles() + j);
  const int row = t.m_block * c.block_m + r;
  if (r >= c.block_m || row >= c.seqlen_q) return;
  const int first = c.split.first_cta(j), last = c.split.last_cta(j);
  const std::int64_t part_floats = std::int64_t{c.block_m} * c.head_dim;
  const float* part_lse = c.partials + std::int64_t{2} * c.split.ctas * part_floats;
  auto output = [&](std::int64_t slot) {
    return reinterpret_cast<const float4*>(c.partials + slot * part_floats + std::int64_t{r} * c.head_dim + col);
  };
  float m = -INFINITY;
  float acc[kColumnsPerThread] = {};
  float sum = 0.f;
  auto add = [&](float w, float4 a, float4 b) {
    sum += w;
    acc[0] += w * a.x, acc[1] += w * a.y, acc[2] += w * a.z, acc[3] += w * a.w;
    acc[4] += w * b.x, acc[5] += w * b.y, acc[6] += w * b.z, acc[7] += w * b.w;
  };
  // Where every CTA holds steps (the tail has at least as many steps as CTAs), the tile's parts are CTAs first .. last;
  // up to kBatchedParts of them are loaded all at once, so that the item costs one round trip to the L2 (a loop that
  // loads a part's values where it uses them waits for each in turn).
  const int parts = last - first + 1;
  if (c.split.tail_steps() >= c.split.ctas && parts <= kBatchedParts) {
    float lse[kBatchedParts];
    float4 lo[kBatchedParts], hi[kBatchedParts];
#pragma unroll
    for (int i = 0; i < kBatchedParts; ++i) {
      if (i >= parts) continue;
      const std::int64_t slot = c.split.slot_of(first + i, j);
      lse[i] = part_lse[slot * c.block_m + r], lo[i] = output(slot)[0], hi[i] = output(slot)[1];
    }
#pragma unroll
    for (int i = 0; i < kBatchedParts; ++i)
      if (i < parts) m = fmaxf(m, lse[i]);
#pragma unroll
    for (int i = 0; i < kBatchedParts; ++i)
      if (i < parts) add(expf(lse[i] - m), lo[i], hi[i]);
  } else {  // many parts, or CTAs without steps among them: the same sums, part by part
    for (int cta = first; cta <= last; ++cta)
      if (c.split.holds_steps(cta)) m = fmaxf(m, part_lse[std::int64_t{c.split.slot_of(cta, j)} * c.block_m + r]);
    for (int cta = first; cta <= last; ++cta) {
      if (!c.split.holds_steps(cta)) continue;
      const std::int64_t slot = c.split.slot_of(cta, j);
      add(expf(part_lse[slot * c.block_m + r] - m), output(slot)[0], output(slot)[1]);
    }
  }
  const float inv = 1.f / sum;
  __align__(16) __nv_bfloat16 out[kColumnsPerThread];
  for (int i = 0; i < kColumnsPerThread; ++i) out[i] = __float2bfloat16_rn(acc[i] * inv);
  *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(c.o) + bmhd_offset(c.o_strides, t.batch, row, t.head, col)) =
      *reinterpret_cast<const uint4*>(out);
  if (c.lse != nullptr && col == 0) c.lse[lse_offset(c.heads, c.seqlen_q, t.batch, t.head, row)] = m + logf(sum);
}

}  // namespace

float* key_split_workspace_alloc(std::int64_t bytes, cudaStream_t stream) {
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;  // by device, created at first use, kept for the process
  int device = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool{};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (pools.size() <= static_cast<std::size_t>(device)) pools.resize(device + 1, nullptr);
    if (pools[device] == nullptr) {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      XSTAGE_CUDA_CHECK(cudaMemPoolCreate(&pools[device], &props));
      std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();  // never hand memory back between calls
      XSTAGE_CUDA_CHECK(cudaMemPoolSetAttribute(pools[device], cudaMemPoolAttrReleaseThreshold, &keep));
    }
    pool = pools[device];
  }
  void* p = nullptr;
  XSTAGE_CUDA_CHECK(cudaMallocFromPoolAsync(&p, static_cast<std::size_t>(bytes), pool, stream));
  return static_cast<float*>(p);
}

void key_split_workspace_free(float* workspace, cudaStream_t stream) { XSTAGE_CUDA_CHECK(cudaFreeAsync(workspace, stream)); }

void launch_key_split_combine(KeySplitCombine const& c, cudaStream_t stream) {
  const int items = c.block_m * (c.head_dim / kColumnsPerThread);
  launch_kernel(key_split_combine_kernel, dim3(c.split.tail_tiles, (items + kCombineThreads - 1) / kCombineThreads), kCombineThreads, 0,
                kEarlyStart, stream, c);
}

}  // namespace xstage::attention
