// The TMA descriptors of every kernel: encoded on the host by the driver's cuTensorMapEncodeTiled, which CuTe's
// make_tma_copy calls at every launch (four descriptors per attention call, four to eight per MoE call). Two of
// its costs are paid once per process instead (docs/PYTHON.md, "Host time per call"):
//   - finding the driver's function: by default CUTLASS asks cudaGetDriverEntryPointByVersion on every call; the
//     project builds CuTe with CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL (CMakeLists.txt, xstage_cute), so that it
//     calls the symbol cuTensorMapEncodeTiled, which tma_encode.cpp defines: it looks the driver's function up
//     once (linking libcuda.so instead would leave libxstage_c.so unloadable on machines without a driver);
//   - encoding: a descriptor is a function of the call's arguments alone, so TmaEncodeCache keeps the descriptors
//     of the last argument sets (bounded) and copies a kept one instead of encoding it again.
// Plain C++ (no CUDA header), so that the cache is tested on machines without a GPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace xstage {

// Everything cuTensorMapEncodeTiled takes, as values: the complete key of a descriptor. Arrays past `rank`
// (at most 5) are zero.
struct TmaEncodeArgs {
  std::int32_t data_type = 0, rank = 0;  // CUtensorMapDataType, tensorRank
  std::uint64_t address = 0;
  std::array<std::uint64_t, 5> dims{};     // globalDim
  std::array<std::uint64_t, 4> strides{};  // globalStrides (bytes, of dimensions 1..rank-1)
  std::array<std::uint32_t, 5> box{};      // boxDim
  std::array<std::uint32_t, 5> element_strides{};
  std::int32_t interleave = 0, swizzle = 0, l2_promotion = 0, oob_fill = 0;

  bool operator==(const TmaEncodeArgs& o) const;
};

struct TmaEncodeArgsHash {
  std::size_t operator()(const TmaEncodeArgs& a) const;
};

// A CUtensorMap: 128 opaque bytes, 128-byte aligned.
struct alignas(128) TmaDescriptorBytes {
  std::array<std::uint64_t, 16> words{};
};

// The descriptors of up to `capacity` distinct argument sets. A full cache is emptied before it takes the next one
// (bounded; a working set larger than the capacity is encoded anew, as without the cache). Thread-safe.
class TmaEncodeCache {
 public:
  static constexpr std::size_t kCapacity = 4096;  // ~1.3 MB; a DiT forward's attention and MoE calls use a few hundred
  // encode(args, out): the driver's status (0: success) and, on success, the descriptor in *out.
  using Encoder = int (*)(const TmaEncodeArgs& args, TmaDescriptorBytes* out);

  explicit TmaEncodeCache(std::size_t capacity = kCapacity) : capacity_(capacity) {}

  // The descriptor of `args` in *out: the kept one, or encode(args, out), kept if it succeeded (a failure is
  // returned every time, never kept). Returns encode's status, 0 for a kept one.
  int get(const TmaEncodeArgs& args, TmaDescriptorBytes* out, Encoder encode);

  std::size_t size() const;
  std::size_t encodes() const;  // calls of encode so far (the misses)

 private:
  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t encodes_ = 0;
  std::unordered_map<TmaEncodeArgs, TmaDescriptorBytes, TmaEncodeArgsHash> kept_;
};

}  // namespace xstage
