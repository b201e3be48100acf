// The HBM reference of `xstage moe bench --hbm-reference`: with few rows per expert the layer is bound by reading
// its experts' weights once from HBM, so the bench times a plain streaming read of the same weight buffers on the
// same GPU and reports how close the layer comes to it. A read-only stream, no compute: the layer also reads
// activations and writes outputs, which are small next to the weights at these sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/device_buffer.hpp"
#include "moe/problem/problem.hpp"

namespace xstage::moe {

// The bytes of one rank's expert weight buffers in moe/layer.hpp's layouts: W1 [E_local][2·h_inter][h] and W2
// [E_local][h][h_inter] of dtype elements, and for fp8 the fp32 128×128 block scales W1_scales
// [E_local·2·h_inter/128][round_up(h/128, 4)] and W2_scales [E_local·h/128][round_up(h_inter/128, 4)] (their
// 16-B row padding included: the buffers hold it and the layer loads whole rows). What the harness allocates,
// and what a layer must read at least once when every local expert gets a row.
struct ExpertWeightBytes {
  std::int64_t W1 = 0, W2 = 0, W1_scales = 0, W2_scales = 0;
  std::int64_t total() const { return W1 + W2 + W1_scales + W2_scales; }
};
ExpertWeightBytes expert_weight_bytes(const MoeProblem& problem);

// A streaming read of `bytes` times is an HBM number only when the L2 cannot hold a useful part of them: at
// least kHbmMinL2Multiple × the L2 size (a smaller read is reported as not meaningful, not as a cached figure).
constexpr std::int64_t kHbmMinL2Multiple = 4;
bool read_streams_from_hbm(std::int64_t bytes, std::int64_t l2_bytes);

// One contiguous device range a StreamRead covers; ptr must be 16-B aligned (cudaMalloc gives 256 B).
struct DeviceSpan {
  const void* ptr = nullptr;
  std::int64_t bytes = 0;
};

// A read of every byte of a list of spans in one launch: 16-B vector loads in a grid-stride loop over each span
// (the last bytes % 16 bytes one by one), as many blocks as are resident on the GPU at once. Each block writes one
// sum of what it read, so no load is dead code and a test can check that exactly the given bytes were read.
class StreamRead {
 public:
  // Throws InputError naming the span for a null or misaligned pointer or a negative size. The device's L2 size
  // and resident-block count are asked here (the calling thread's current device).
  explicit StreamRead(std::vector<DeviceSpan> spans);
  std::int64_t bytes() const { return bytes_; }
  std::int64_t l2_bytes() const { return l2_bytes_; }
  void enqueue(cudaStream_t stream) const;
  // The sum over the spans of every 16-B vector's four 32-bit words (little-endian) and of each tail byte, mod
  // 2^64, from the last completed enqueue (synchronises the device).
  std::uint64_t checksum() const;

 private:
  std::vector<DeviceSpan> spans_;
  std::int64_t bytes_ = 0, l2_bytes_ = 0;
  int blocks_ = 0;
  DeviceBuffer block_sums_;  // [blocks_] uint64
};

}  // namespace xstage::moe
