// Shared by the C ABI's translation units (not installed, not part of the ABI): turning exceptions into
// statuses, and the checks every operation makes on its xstage_tensor arguments.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>

#include "capi/xstage_c.h"
#include "common/device_facts.hpp"
#include "common/error.hpp"

namespace xstage::capi {

void set_last_error(std::string message);
void clear_last_error();

// Runs `body` (which throws on failure) and returns the C status; no exception leaves this function.
// xstage::InputError -> 2, PlatformError -> 3, any other xstage::Error (in library code: a failed CUDA or
// NCCL call) -> 3, anything else -> 1. The message is prefixed with the C function's name.
template <class Body>
int guarded(const char* function, Body&& body) noexcept {
  // The message is built on failure only: a call that succeeds allocates nothing here.
  const auto fail = [function](int status, const char* what) noexcept {
    try {
      set_last_error(std::string(function) + ": " + what);
    } catch (...) {  // out of host memory for the message itself: the status still says what kind of failure
    }
    return status;
  };
  try {
    clear_last_error();
    body();
    return XSTAGE_OK;
  } catch (const InputError& e) {
    return fail(XSTAGE_ERROR_INPUT, e.what());
  } catch (const PlatformError& e) {
    return fail(XSTAGE_ERROR_PLATFORM, e.what());
  } catch (const Error& e) {
    return fail(XSTAGE_ERROR_PLATFORM, e.what());
  } catch (const std::bad_alloc&) {
    return fail(XSTAGE_ERROR_OTHER, "out of host memory");
  } catch (const std::exception& e) {
    return fail(XSTAGE_ERROR_OTHER, e.what());
  } catch (...) {
    return fail(XSTAGE_ERROR_OTHER, "unknown C++ exception");
  }
}

// "bfloat16", "float32", ... or "dtype code N" for codes outside the ABI's list.
std::string dtype_name(int32_t dtype);

// "[2, 4096, 24, 128]"
std::string shape_string(const xstage_tensor& t);

// Throws InputError unless `t` is non-null, has 1..XSTAGE_MAX_NDIM dimensions, no negative sizes and
// reserved == 0. Returns *t.
const xstage_tensor& require_tensor(const xstage_tensor* t, const char* name);

// Throws InputError naming the tensor unless it has `ndim` dimensions (`layout` describes them).
void require_ndim(const xstage_tensor& t, const char* name, int32_t ndim, const char* layout);

// Throws InputError naming the tensor unless its dtype is `dtype`.
void require_dtype(const xstage_tensor& t, const char* name, int32_t dtype);

// Throws InputError unless `t` is on CUDA device `device` (the one the first tensor named `first` is on).
void require_same_cuda_device(const xstage_tensor& t, const char* name, int32_t device, const char* first);

// The stride of dimension `dim`, or, where that dimension has size 1 (so its stride is never used), a
// stride every check accepts: the tensor's element span rounded up to 8 elements.
int64_t effective_stride(const xstage_tensor& t, int dim);

// Bytes per element of an ABI dtype code (0 for an unknown code).
int64_t element_bytes(int32_t dtype);

// Elements of `t` (the product of its sizes).
int64_t element_count(const xstage_tensor& t);

// Throws InputError naming the tensor unless its shape is exactly `dims` (`layout` names the dimensions,
// e.g. "[tokens, hidden]").
void require_shape(const xstage_tensor& t, const char* name, std::initializer_list<int64_t> dims, const char* layout);

// Throws InputError naming the tensor unless it is densely packed row-major (contiguous; strides of
// dimensions of size 1 are not looked at).
void require_contiguous(const xstage_tensor& t, const char* name);

// Throws InputError unless the tensor's data pointer is a multiple of `bytes` (a tensor without elements
// passes).
void require_aligned(const xstage_tensor& t, const char* name, int bytes);

// Throws InputError unless the memory of two contiguous tensors does not overlap.
void require_disjoint(const xstage_tensor& a, const char* a_name, const xstage_tensor& b, const char* b_name);

// Makes `device` current for the guard's lifetime and restores the caller's device afterwards. Throws
// PlatformError when CUDA is unusable (no driver, no GPU) or the device does not exist.
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int32_t device_ = 0;
};

// Throws InputError unless `ptr` is CUDA device (or managed) memory that belongs to `device`.
void require_device_pointer(const void* ptr, const char* name, int32_t device);

// Throws InputError unless `stream` (a cudaStream_t; NULL means the legacy default stream) is a stream of
// `device`. Needs `device` to be current (DeviceGuard).
void require_stream_on_device(void* stream, int32_t device);

}  // namespace xstage::capi
