// Checked NCCL calls.
//
// NCCL probes the driver during some calls (communicator and window set-up, the first collective) and
// leaves the failed probes' errors in the thread's CUDA last-error slot. That slot belongs to whoever called
// us (a framework checks it after its own launches), so each checked NCCL call restores it: if the slot was
// clean before the call, whatever NCCL left in it is taken out; an error that was already there (someone
// else's) stays untouched.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <sstream>

#include "common/error.hpp"

#define XSTAGE_NCCL_CHECK(expr)                                                             \
  do {                                                                                      \
    const bool xstage_slot_clean_ = cudaPeekAtLastError() == cudaSuccess;                  \
    ncclResult_t xstage_res_ = (expr);                                                      \
    if (xstage_slot_clean_) (void)cudaGetLastError();                                       \
    if (xstage_res_ != ncclSuccess) {                                                       \
      std::ostringstream xstage_os_;                                                        \
      xstage_os_ << "NCCL error " << static_cast<int>(xstage_res_) << " ("                  \
                 << ncclGetErrorString(xstage_res_) << ") in `" #expr "` at " << __FILE__   \
                 << ":" << __LINE__;                                                        \
      throw ::xstage::Error(xstage_os_.str());                                              \
    }                                                                                       \
  } while (0)
