// Checked cuBLAS calls: every call site names the call that failed and where.
#pragma once

#include <cublas_v2.h>

#include <sstream>

#include "common/error.hpp"

#define XSTAGE_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                      \
    cublasStatus_t xstage_st_ = (expr);                                                     \
    if (xstage_st_ != CUBLAS_STATUS_SUCCESS) {                                              \
      std::ostringstream xstage_os_;                                                        \
      xstage_os_ << "cuBLAS error " << cublasGetStatusName(xstage_st_) << " ("              \
                 << cublasGetStatusString(xstage_st_) << ") in `" #expr "` at " << __FILE__ \
                 << ":" << __LINE__;                                                        \
      throw ::xstage::Error(xstage_os_.str());                                              \
    }                                                                                       \
  } while (0)
