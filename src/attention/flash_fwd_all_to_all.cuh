// Host side of the fused Ulysses forward for one kernel configuration and store path: the plain launcher
// with the all-to-all epilogue and the destination-interleaved tile order. Included only by the
// per-configuration translation units (generated from tile_shapes.hpp's list).
#pragma once

#include "attention/epilogue_all_to_all.hpp"
#include "attention/flash_fwd_launch.cuh"

namespace xstage::attention::detail {

// One store path's epilogue: fused_both's kernel (its rank's own rows read in place) or fused_post's, two kernels so
// that fused_post's carries none of that path. Launched to start early: it is a link of the Ulysses layer's chain of
// kernels (ulysses/layer.cu).
template <FwdTileConfigId kId, template <class> class Epilogue, FwdKernelFamily kFamily>
void launch_flash_fwd_a2a(FlashFwdArgs const& args, AllToAllDestinations const& dst, InputArrivals const& inputs, DeviceFacts const& device,
                          cudaStream_t stream) {
  using Config = typename FlashFwdTileConfigFor<kId, kFamily>::type;
  const int m_blocks = ceil_div(args.problem.seqlen_q, Config::kBlockM);
  const int stride = destination_interleave_stride(m_blocks, dst.shape.ranks);
  const typename Epilogue<Config>::Params epilogue = Epilogue<Config>::make_params(args, dst);
  if (inputs.own_q != nullptr)
    launch_flash_fwd_kernel<FlashFwdKernel<Config, Epilogue, true>>(args, epilogue, stride, device, stream, inputs, kEarlyStart);
  else
    launch_flash_fwd_kernel<FlashFwdKernel<Config, Epilogue>>(args, epilogue, stride, device, stream, inputs, kEarlyStart);
}

template <FwdTileConfigId kId>
void launch_flash_fwd_a2a_config(FlashFwdArgs const& args, AllToAllDestinations const& dst, A2AStorePath path,
                                 InputArrivals const& inputs, DeviceFacts const& device, cudaStream_t stream) {
  if (path == A2AStorePath::tma)
    launch_flash_fwd_a2a<kId, EpilogueAllToAllTma, FwdKernelFamily::all_to_all_tma>(args, dst, inputs, device, stream);
  else
    launch_flash_fwd_a2a<kId, EpilogueAllToAllStGlobal, FwdKernelFamily::all_to_all_st_global>(args, dst, inputs, device, stream);
}

}  // namespace xstage::attention::detail
