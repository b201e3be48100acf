// The device half of harness/weight_stream.hpp: the streaming read.
#include <numeric>
#include <string>

#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/launch.cuh"
#include "moe/harness/weight_stream.hpp"

namespace xstage::moe {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSpans = 8;
constexpr int kVecBytes = 16;
// Independent 16-B loads each thread has in flight before it uses one: with every thread of every SM resident,
// 4 of them put ~17 MB in flight on 132 SMs, several times the HBM's bandwidth-latency product (~4 MB), so the
// read is not bound by latency.
constexpr int kLoadsInFlight = 4;

struct Spans {
  const std::uint8_t* ptr[kMaxSpans];
  std::int64_t bytes[kMaxSpans];
  int count;
};

// An L2 policy that marks every line a load brings in as evict-first (sm_80+; Hopper's ld takes L2 eviction
// priorities only this way, through .L2::cache_hint).
__device__ __forceinline__ std::uint64_t evict_first_policy() {
  std::uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// One 16-B vector of read-once data. .nc: the read-only data path (nothing writes the buffers during the read);
// L1::no_allocate: nothing is read twice, so nothing is worth a line in L1; the evict-first policy: the lines are
// not read again before the L2 turns over (the fused fp8 kernel's weight loads are marked the same way), so they
// displace nothing else; L2::256B: a miss fetches the 256-B span that this warp's next loads need anyway.
__device__ __forceinline__ uint4 load_once(const uint4* p, std::uint64_t policy) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy));
  return v;
}

__device__ __forceinline__ unsigned long long word_sum(uint4 v) {
  return static_cast<unsigned long long>(v.x) + v.y + v.z + v.w;
}

__global__ void __launch_bounds__(kThreads) stream_read_kernel(Spans spans, unsigned long long* block_sums) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::uint64_t policy = evict_first_policy();
  unsigned long long sum = 0;
  for (int s = 0; s < spans.count; ++s) {
    const uint4* v = reinterpret_cast<const uint4*>(spans.ptr[s]);
    const std::int64_t n = spans.bytes[s] / kVecBytes;
    std::int64_t i = tid;
    for (; i + (kLoadsInFlight - 1) * stride < n; i += kLoadsInFlight * stride) {
      uint4 x[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) x[u] = load_once(v + i + u * stride, policy);
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) sum += word_sum(x[u]);
    }
    for (; i < n; i += stride) sum += word_sum(load_once(v + i, policy));
    if (tid < spans.bytes[s] % kVecBytes) sum += __ldg(spans.ptr[s] + n * kVecBytes + tid);  // the tail, byte by byte
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  __shared__ unsigned long long warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    block_sums[blockIdx.x] = total;
  }
}

}  // namespace

StreamRead::StreamRead(std::vector<DeviceSpan> spans) {
  std::erase_if(spans, [](const DeviceSpan& s) { return s.bytes == 0; });
  XSTAGE_REQUIRE(!spans.empty(), "stream read: no bytes to read");
  XSTAGE_REQUIRE(spans.size() <= kMaxSpans,
                 "stream read: " + std::to_string(spans.size()) + " spans, at most " + std::to_string(kMaxSpans));
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const DeviceSpan& s = spans[i];
    const std::string name = "stream read: span " + std::to_string(i) + " ";
    XSTAGE_REQUIRE(s.bytes > 0, name + "has a negative size (" + std::to_string(s.bytes) + " B)");
    XSTAGE_REQUIRE(s.ptr != nullptr, name + "has no pointer");
    XSTAGE_REQUIRE(reinterpret_cast<std::uintptr_t>(s.ptr) % kVecBytes == 0,
                   name + "starts off a 16-B boundary (its 16-B vector loads need the alignment)");
    bytes_ += s.bytes;
  }
  spans_ = std::move(spans);
  int device = 0, l2 = 0, per_sm = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  XSTAGE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stream_read_kernel, kThreads, 0));
  if (per_sm < 1) throw PlatformError("stream read: the read kernel cannot run one block per SM on this device");
  l2_bytes_ = l2;
  // Exactly the blocks that are resident at once: every block reads the same share, so a block that had to wait
  // for another to finish would double the time of its SM.
  blocks_ = per_sm * device_facts(device).sm_count;
  block_sums_ = DeviceBuffer(static_cast<std::size_t>(blocks_) * sizeof(unsigned long long));
}

void StreamRead::enqueue(cudaStream_t stream) const {
  Spans args{};
  args.count = static_cast<int>(spans_.size());
  for (int i = 0; i < args.count; ++i) {
    args.ptr[i] = static_cast<const std::uint8_t*>(spans_[i].ptr);
    args.bytes[i] = spans_[i].bytes;
  }
  launch_kernel(stream_read_kernel, blocks_, kThreads, 0, stream, args, block_sums_.get<unsigned long long>());
}

std::uint64_t StreamRead::checksum() const {
  std::vector<unsigned long long> sums(blocks_);
  XSTAGE_CUDA_CHECK(cudaDeviceSynchronize());
  XSTAGE_CUDA_CHECK(cudaMemcpy(sums.data(), block_sums_.get(), sums.size() * sizeof(sums[0]), cudaMemcpyDeviceToHost));
  return std::accumulate(sums.begin(), sums.end(), std::uint64_t{0});
}

}  // namespace xstage::moe
