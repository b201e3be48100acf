// Checked NCCL calls.
#pragma once

#include <nccl.h>

#include <sstream>

#include "common/error.hpp"

#define XSTAGE_NCCL_CHECK(expr)                                                             \
  do {                                                                                      \
    ncclResult_t xstage_res_ = (expr);                                                      \
    if (xstage_res_ != ncclSuccess) {                                                       \
      std::ostringstream xstage_os_;                                                        \
      xstage_os_ << "NCCL error " << static_cast<int>(xstage_res_) << " ("                  \
                 << ncclGetErrorString(xstage_res_) << ") in `" #expr "` at " << __FILE__   \
                 << ":" << __LINE__;                                                        \
      throw ::xstage::Error(xstage_os_.str());                                              \
    }                                                                                       \
  } while (0)
