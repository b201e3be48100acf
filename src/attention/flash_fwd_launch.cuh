// Host side of one kernel configuration: TMA descriptors from the user's strides, grid size from the
// tile count and the SM count, dynamic shared memory, launch. Included only by the per-head-dim .cu files.
#pragma once

#include <cuda_runtime.h>

#include "attention/epilogue_store.hpp"
#include "attention/flash_fwd_kernel.hpp"
#include "attention/flash_fwd_params.hpp"
#include "common/cuda_check.hpp"

namespace xstage::attention::detail {

template <class Kernel>
void launch_flash_fwd(FlashFwdArgs const& args, cudaStream_t stream) {
  using Config = typename Kernel::Config;
  const FlashFwdProblem& p = args.problem;

  typename Kernel::Params params{Kernel::Mainloop::make_params(args), Kernel::Epilogue::make_params(args),
                                 StaticPersistentTileScheduler{ceil_div(p.seqlen_q, Config::kBlockM), p.heads, p.batch}};

  int device = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  int num_sms = 0;
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));

  auto kernel = &flash_fwd_sm90_kernel<Kernel>;
  constexpr int smem_bytes = Kernel::kSharedStorageBytes;
  // Cheap, and needed once per device and process; repeating it keeps the launcher stateless.
  XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));

  const int grid = StaticPersistentTileScheduler::grid_size(params.scheduler.num_tiles(), num_sms);
  kernel<<<grid, Kernel::kNumThreads, smem_bytes, stream>>>(params);
  XSTAGE_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim>
using PlainFlashFwdKernel = FlashFwdKernel<typename FlashFwdTileConfigFor<kHeadDim>::type, EpilogueStoreTma>;

}  // namespace xstage::attention::detail
