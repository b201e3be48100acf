// The fused Ulysses forward (epilogue_all_to_all.hpp) for configuration kHdim64Rows192, both store paths, in its own
// translation unit: keeps the build parallel and each compile short.
#include "attention/flash_fwd.hpp"
#include "attention/flash_fwd_all_to_all.cuh"

namespace xstage::attention::detail {

template <>
void launch_flash_fwd_a2a_config<FwdTileConfigId::kHdim64Rows192>(FlashFwdArgs const& args, AllToAllDestinations const& dst,
                                                                 A2AStorePath path, int num_sms, cudaStream_t stream) {
  if (path == A2AStorePath::tma) launch_flash_fwd_a2a<FwdTileConfigId::kHdim64Rows192, A2AStorePath::tma>(args, dst, num_sms, stream);
  else launch_flash_fwd_a2a<FwdTileConfigId::kHdim64Rows192, A2AStorePath::st_global>(args, dst, num_sms, stream);
}

}  // namespace xstage::attention::detail
