// RAII device allocation (checks, benchmarks, harnesses).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "common/cuda_check.hpp"

namespace xstage {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) XSTAGE_CUDA_CHECK(cudaMalloc(&ptr_, bytes_));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }

  template <class T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace xstage
