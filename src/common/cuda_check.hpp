// Checked CUDA and NCCL calls: every call site names the call that failed and where.
#pragma once

#include <cuda_runtime.h>

#include <sstream>

#include "common/error.hpp"

#define XSTAGE_CUDA_CHECK(expr)                                                              \
  do {                                                                                       \
    cudaError_t xstage_err_ = (expr);                                                        \
    if (xstage_err_ != cudaSuccess) {                                                        \
      std::ostringstream xstage_os_;                                                         \
      xstage_os_ << "CUDA error " << cudaGetErrorName(xstage_err_) << " ("                   \
                 << cudaGetErrorString(xstage_err_) << ") in `" #expr "` at " << __FILE__    \
                 << ":" << __LINE__;                                                         \
      throw ::xstage::Error(xstage_os_.str());                                               \
    }                                                                                        \
  } while (0)

// Kernel launches: launch_kernel (common/launch.cuh), which checks the launch's own return value.
