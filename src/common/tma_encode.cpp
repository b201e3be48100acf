#include "common/tma_encode.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstring>

namespace xstage {

bool TmaEncodeArgs::operator==(const TmaEncodeArgs& o) const {
  return data_type == o.data_type && rank == o.rank && address == o.address && dims == o.dims && strides == o.strides &&
         box == o.box && element_strides == o.element_strides && interleave == o.interleave && swizzle == o.swizzle &&
         l2_promotion == o.l2_promotion && oob_fill == o.oob_fill;
}

std::size_t TmaEncodeArgsHash::operator()(const TmaEncodeArgs& a) const {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields' values
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  mix(static_cast<std::uint64_t>(a.data_type) << 32 | static_cast<std::uint32_t>(a.rank));
  mix(a.address);
  for (std::uint64_t d : a.dims) mix(d);
  for (std::uint64_t s : a.strides) mix(s);
  for (int i = 0; i < 5; ++i) mix(static_cast<std::uint64_t>(a.box[i]) << 32 | a.element_strides[i]);
  mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.interleave)) << 32 | static_cast<std::uint32_t>(a.swizzle));
  mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.l2_promotion)) << 32 | static_cast<std::uint32_t>(a.oob_fill));
  return static_cast<std::size_t>(h);
}

int TmaEncodeCache::get(const TmaEncodeArgs& args, TmaDescriptorBytes* out, Encoder encode) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = kept_.find(args);
    if (found != kept_.end()) {
      *out = found->second;
      return 0;
    }
    ++encodes_;
  }
  const int status = encode(args, out);  // outside the lock: the driver's work
  if (status != 0) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  if (kept_.size() >= capacity_) kept_.clear();
  kept_.emplace(args, *out);
  return 0;
}

std::size_t TmaEncodeCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.size();
}

std::size_t TmaEncodeCache::encodes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return encodes_;
}

namespace {

// The driver's cuTensorMapEncodeTiled, looked up once per process (nullptr where there is no driver).
PFN_cuTensorMapEncodeTiled_v12000 driver_encode() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* pfn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &found);
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pfn)
                                                                    : nullptr;
  }();
  return fn;
}

int encode_with_driver(const TmaEncodeArgs& a, TmaDescriptorBytes* out) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = driver_encode();
  if (encode == nullptr) return CUDA_ERROR_NOT_FOUND;
  static_assert(sizeof(TmaDescriptorBytes) == sizeof(CUtensorMap) && alignof(TmaDescriptorBytes) >= alignof(CUtensorMap));
  return encode(reinterpret_cast<CUtensorMap*>(out), static_cast<CUtensorMapDataType>(a.data_type),
                static_cast<cuuint32_t>(a.rank), reinterpret_cast<void*>(a.address), a.dims.data(), a.strides.data(),
                a.box.data(), a.element_strides.data(), static_cast<CUtensorMapInterleave>(a.interleave),
                static_cast<CUtensorMapSwizzle>(a.swizzle), static_cast<CUtensorMapL2promotion>(a.l2_promotion),
                static_cast<CUtensorMapFloatOOBfill>(a.oob_fill));
}

}  // namespace
}  // namespace xstage

// What CuTe calls (CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL): the driver's encoding through the process's cache.
// Hidden, as every symbol of the libraries but the C ABI.
extern "C" CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                   cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                                   const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                                   const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                                   CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                                   CUtensorMapFloatOOBfill oobFill) {
  if (tensorMap == nullptr || tensorRank < 1 || tensorRank > 5) return CUDA_ERROR_INVALID_VALUE;  // as the driver would
  xstage::TmaEncodeArgs a;
  a.data_type = static_cast<std::int32_t>(tensorDataType);
  a.rank = static_cast<std::int32_t>(tensorRank);
  a.address = reinterpret_cast<std::uint64_t>(globalAddress);
  for (cuuint32_t i = 0; i < tensorRank; ++i) {
    a.dims[i] = globalDim[i];
    a.box[i] = boxDim[i];
    a.element_strides[i] = elementStrides[i];
    if (i + 1 < tensorRank) a.strides[i] = globalStrides[i];
  }
  a.interleave = static_cast<std::int32_t>(interleave);
  a.swizzle = static_cast<std::int32_t>(swizzle);
  a.l2_promotion = static_cast<std::int32_t>(l2Promotion);
  a.oob_fill = static_cast<std::int32_t>(oobFill);
  static xstage::TmaEncodeCache cache;
  xstage::TmaDescriptorBytes bytes;
  const int status = cache.get(a, &bytes, xstage::encode_with_driver);
  if (status == CUDA_SUCCESS) std::memcpy(tensorMap, &bytes, sizeof bytes);
  return static_cast<CUresult>(status);
}
