// One kernel instantiation per translation unit (configuration kHdim128Rows128, tile_shapes.hpp): keeps the
// build parallel and each compile short.
#include "attention/flash_fwd.hpp"
#include "attention/flash_fwd_launch.cuh"

namespace xstage::attention::detail {

template <>
void launch_flash_fwd_config<FwdTileConfigId::kHdim128Rows128>(FlashFwdArgs const& args, int num_sms, cudaStream_t stream) {
  launch_flash_fwd<PlainFlashFwdKernel<FwdTileConfigId::kHdim128Rows128>>(args, num_sms, stream);
}

}  // namespace xstage::attention::detail
