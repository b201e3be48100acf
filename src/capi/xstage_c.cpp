// The C ABI's common part: versions, the per-thread error message, and the checks on xstage_tensor
// arguments and CUDA devices that every operation shares. Operations live one per file (attention.cpp).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include "capi/capi_internal.hpp"
#include "capi/xstage_c.h"
#include "common/device_facts.hpp"
#include "common/error.hpp"

#ifndef XSTAGE_VERSION_STRING
#define XSTAGE_VERSION_STRING "unknown"
#endif

namespace xstage::capi {
namespace {

thread_local std::string t_last_error;

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

void set_last_error(std::string message) { t_last_error = std::move(message); }
void clear_last_error() { t_last_error.clear(); }

std::string dtype_name(int32_t dtype) {
  switch (dtype) {
    case XSTAGE_DTYPE_BFLOAT16: return "bfloat16";
    case XSTAGE_DTYPE_FLOAT16: return "float16";
    case XSTAGE_DTYPE_FLOAT32: return "float32";
    case XSTAGE_DTYPE_FLOAT8_E4M3: return "float8_e4m3fn";
    case XSTAGE_DTYPE_INT32: return "int32";
    case XSTAGE_DTYPE_INT64: return "int64";
    case XSTAGE_DTYPE_UINT8: return "uint8";
    default: return "dtype code " + std::to_string(dtype);
  }
}

std::string shape_string(const xstage_tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < t.ndim && i < XSTAGE_MAX_NDIM; ++i) os << (i ? ", " : "") << t.shape[i];
  os << "]";
  return os.str();
}

const xstage_tensor& require_tensor(const xstage_tensor* t, const char* name) {
  XSTAGE_REQUIRE(t != nullptr, std::string(name) + " is NULL");
  XSTAGE_REQUIRE(t->ndim >= 1 && t->ndim <= XSTAGE_MAX_NDIM,
                 std::string(name) + " has ndim " + std::to_string(t->ndim) + " (must be 1.." +
                     std::to_string(XSTAGE_MAX_NDIM) + ")");
  for (int i = 0; i < t->ndim; ++i)
    XSTAGE_REQUIRE(t->shape[i] >= 0, std::string(name) + " has a negative size: shape " + shape_string(*t));
  XSTAGE_REQUIRE(t->reserved == 0, std::string(name) + ".reserved must be 0 (xstage_tensor not zero-initialised?)");
  return *t;
}

void require_ndim(const xstage_tensor& t, const char* name, int32_t ndim, const char* layout) {
  XSTAGE_REQUIRE(t.ndim == ndim, std::string(name) + " must be " + std::to_string(ndim) + "-D " + layout +
                                     "; got shape " + shape_string(t));
}

void require_dtype(const xstage_tensor& t, const char* name, int32_t dtype) {
  XSTAGE_REQUIRE(t.dtype == dtype, std::string(name) + " has dtype " + dtype_name(t.dtype) + "; it must be " +
                                       dtype_name(dtype));
}

void require_same_cuda_device(const xstage_tensor& t, const char* name, int32_t device, const char* first) {
  if (t.device == XSTAGE_DEVICE_CPU || t.device < 0) {
    throw InputError(std::string(name) + " is in host memory (device " + std::to_string(t.device) +
                     "); it must be CUDA device memory");
  }
  XSTAGE_REQUIRE(t.device == device, std::string(name) + " is on CUDA device " + std::to_string(t.device) +
                                         " but " + first + " is on CUDA device " + std::to_string(device) +
                                         "; all tensors must be on one device");
}

int64_t effective_stride(const xstage_tensor& t, int dim) {
  if (t.shape[dim] != 1) return t.strides[dim];
  int64_t span = 1;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] > 1) span += (t.shape[i] - 1) * std::llabs(t.strides[i]);
  return (span + 7) / 8 * 8;
}

int64_t element_bytes(int32_t dtype) {
  switch (dtype) {
    case XSTAGE_DTYPE_BFLOAT16: case XSTAGE_DTYPE_FLOAT16: return 2;
    case XSTAGE_DTYPE_FLOAT32: case XSTAGE_DTYPE_INT32: return 4;
    case XSTAGE_DTYPE_FLOAT8_E4M3: case XSTAGE_DTYPE_UINT8: return 1;
    case XSTAGE_DTYPE_INT64: return 8;
    default: return 0;
  }
}

int64_t element_count(const xstage_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

void require_shape(const xstage_tensor& t, const char* name, std::initializer_list<int64_t> dims, const char* layout) {
  bool same = t.ndim == static_cast<int32_t>(dims.size());
  int i = 0;
  for (int64_t d : dims) same = same && t.shape[i++] == d;
  if (same) return;
  std::ostringstream want;
  want << "[";
  i = 0;
  for (int64_t d : dims) want << (i++ ? ", " : "") << d;
  want << "]";
  throw InputError(std::string(name) + " has shape " + shape_string(t) + "; it must be " + layout + " = " + want.str());
}

void require_contiguous(const xstage_tensor& t, const char* name) {
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) {
      std::ostringstream os;
      os << name << " is not contiguous (shape " << shape_string(t) << ", strides [";
      for (int j = 0; j < t.ndim; ++j) os << (j ? ", " : "") << t.strides[j];
      os << "]); it must be densely packed row-major";
      throw InputError(os.str());
    }
    expected *= t.shape[i];
  }
}

void require_aligned(const xstage_tensor& t, const char* name, int bytes) {
  if (element_count(t) == 0) return;
  XSTAGE_REQUIRE(t.data != nullptr, std::string(name) + " has a NULL data pointer");
  XSTAGE_REQUIRE(reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(bytes) == 0,
                 std::string(name) + "'s data pointer is not " + std::to_string(bytes) + "-byte aligned");
}

void require_disjoint(const xstage_tensor& a, const char* a_name, const xstage_tensor& b, const char* b_name) {
  const auto lo_a = reinterpret_cast<std::uintptr_t>(a.data), lo_b = reinterpret_cast<std::uintptr_t>(b.data);
  const auto hi_a = lo_a + static_cast<std::uintptr_t>(element_count(a) * element_bytes(a.dtype));
  const auto hi_b = lo_b + static_cast<std::uintptr_t>(element_count(b) * element_bytes(b.dtype));
  if (lo_a == hi_a || lo_b == hi_b) return;
  XSTAGE_REQUIRE(hi_a <= lo_b || hi_b <= lo_a, std::string(a_name) + " and " + b_name + " overlap in memory");
}

DeviceGuard::DeviceGuard(int32_t device) : device_(device) {
  (void)device_facts(device);  // PlatformError when CUDA is unusable or there is no such device (asked once)
  cudaError_t g = cudaGetDevice(&previous_);
  if (g != cudaSuccess) {
    (void)cudaGetLastError();
    throw PlatformError("cudaGetDevice failed: " + cuda_error_text(g));
  }
  if (previous_ != device) {
    g = cudaSetDevice(device);
    if (g != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
      throw PlatformError("cudaSetDevice(" + std::to_string(device) + ") failed: " + cuda_error_text(g));
    }
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != device_) (void)cudaSetDevice(previous_);
}

void require_device_pointer(const void* ptr, const char* name, int32_t device) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw InputError(std::string(name) + ": cannot query its pointer (" + cuda_error_text(e) + ")");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    throw InputError(std::string(name) + " points to host memory, not CUDA device memory");
  }
  XSTAGE_REQUIRE(attr.device == device, std::string(name) + " is said to be on CUDA device " + std::to_string(device) +
                                            " but its memory is on device " + std::to_string(attr.device));
}

void require_stream_on_device(void* stream, int32_t device) {
  // Querying a stream's device is not allowed while the stream is being captured into a CUDA graph (it would
  // invalidate the capture); a capture on a stream of another device fails at the launch instead.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone)
    return;
  int stream_device = -1;
  const cudaError_t e = cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &stream_device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw InputError("cannot query the stream's device (" + cuda_error_text(e) + "): not a valid CUDA stream?");
  }
  XSTAGE_REQUIRE(stream_device == device, "the stream belongs to CUDA device " + std::to_string(stream_device) +
                                              " but the tensors are on CUDA device " + std::to_string(device));
}

}  // namespace xstage::capi

extern "C" {

XSTAGE_C_API int32_t xstage_abi_version(void) { return XSTAGE_C_ABI_VERSION; }

XSTAGE_C_API size_t xstage_tensor_struct_size(void) { return sizeof(xstage_tensor); }

XSTAGE_C_API const char* xstage_version(void) { return XSTAGE_VERSION_STRING; }

XSTAGE_C_API const char* xstage_last_error(void) { return xstage::capi::t_last_error.c_str(); }

XSTAGE_C_API int xstage_check_device(int32_t device) {
  return xstage::capi::guarded("xstage_check_device", [&] { xstage::require_sm90(device); });
}

}  // extern "C"
