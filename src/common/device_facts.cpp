#include "common/device_facts.hpp"

#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/cuda_check.hpp"
#include "common/error.hpp"

namespace xstage {
namespace {

std::string cuda_error_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Devices 0..63 through a lock-free array (the per-call path), the rest through the map under the lock.
std::mutex g_mutex;
std::array<std::atomic<const DeviceFacts*>, 64> g_fast{};
std::unordered_map<int, std::unique_ptr<DeviceFacts>> g_facts;

DeviceFacts ask_cuda(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw PlatformError("CUDA is not usable on this machine (cudaGetDeviceCount: " + cuda_error_text(e) +
                        "): no NVIDIA driver or no GPU");
  }
  if (device < 0 || device >= count)
    throw PlatformError("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " visible)");
  DeviceFacts f;
  f.device = device;
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&f.sm_count, cudaDevAttrMultiProcessorCount, device));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&f.cc_major, cudaDevAttrComputeCapabilityMajor, device));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&f.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&f.smem_optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return f;
}

}  // namespace

const DeviceFacts& device_facts(int device) {
  if (device >= 0 && device < 64)
    if (const DeviceFacts* f = g_fast[device].load(std::memory_order_acquire)) return *f;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_facts.find(device);
  if (it == g_facts.end()) it = g_facts.emplace(device, std::make_unique<DeviceFacts>(ask_cuda(device))).first;
  if (device >= 0 && device < 64) g_fast[device].store(it->second.get(), std::memory_order_release);
  return *it->second;
}

const DeviceFacts& current_device_facts() {
  int device = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  return device_facts(device);
}

void require_sm90(int device) {
  const DeviceFacts& f = device_facts(device);
  if (f.sm90()) return;
  cudaDeviceProp prop{};
  const std::string name = cudaGetDeviceProperties(&prop, device) == cudaSuccess ? prop.name : "?";
  throw PlatformError("CUDA device " + std::to_string(device) + " (" + name + ") is sm_" + std::to_string(f.cc_major) +
                      std::to_string(f.cc_minor) + "; xstage's kernels are built for sm_90a (Hopper: H100, H200, GH200)");
}

void SharedMemoryOptIn::ensure(const void* kernel, std::size_t bytes, const DeviceFacts& f) {
  const int device = f.device;
  const std::uint64_t bit = device >= 0 && device < 64 ? std::uint64_t(1) << device : 0;
  if (bit && (devices_.load(std::memory_order_acquire) & bit)) return;
  if (bytes > static_cast<std::size_t>(f.smem_optin_bytes))
    throw PlatformError("a kernel needs " + std::to_string(bytes) + " bytes of shared memory per block; CUDA device " +
                        std::to_string(device) + " offers " + std::to_string(f.smem_optin_bytes));
  XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  devices_.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace xstage
