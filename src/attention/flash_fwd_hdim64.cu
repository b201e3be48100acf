// The head-dim 64 instantiation of the forward kernel (one translation unit per head dim keeps the
// build parallel and each compile short).
#include "attention/flash_fwd.hpp"
#include "attention/flash_fwd_launch.cuh"

namespace xstage::attention::detail {

void launch_flash_fwd_hdim64(FlashFwdArgs const& args, cudaStream_t stream) {
  launch_flash_fwd<PlainFlashFwdKernel<64>>(args, stream);
}

}  // namespace xstage::attention::detail
