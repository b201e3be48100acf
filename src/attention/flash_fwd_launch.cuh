// Host side of one kernel configuration: TMA descriptors from the user's strides, grid size from the
// tile count and the SM count, dynamic shared memory, launch. Included only by the per-head-dim .cu files.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "attention/epilogue_store.hpp"
#include "attention/flash_fwd_kernel.hpp"
#include "attention/flash_fwd_params.hpp"
#include "common/cuda_check.hpp"
#include "common/launch.cuh"

namespace xstage::attention::detail {

// `m_block_stride`: the tile scheduler's m-block order (1: in order; tile_scheduler.hpp).
template <class Kernel>
void launch_flash_fwd_kernel(FlashFwdArgs const& args, typename Kernel::Epilogue::Params const& epilogue, int m_block_stride,
                             int num_sms, cudaStream_t stream) {
  using Config = typename Kernel::Config;
  const FlashFwdProblem& p = args.problem;

  typename Kernel::Params params{Kernel::Mainloop::make_params(args), epilogue,
                                 StaticPersistentTileScheduler{ceil_div(p.seqlen_q, Config::kBlockM), p.heads, p.batch, m_block_stride}};

  int device = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));

  auto kernel = &flash_fwd_sm90_kernel<Kernel>;
  constexpr int smem_bytes = Kernel::kSharedStorageBytes;
  // The shared-memory opt-in is per device; done once per device so small launches stay cheap.
  static std::atomic<uint64_t> opted_in_devices{0};
  const uint64_t bit = uint64_t(1) << (device % 64);
  if ((opted_in_devices.load(std::memory_order_acquire) & bit) == 0) {
    XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    opted_in_devices.fetch_or(bit, std::memory_order_acq_rel);
  }

  const int grid = StaticPersistentTileScheduler::grid_size(params.scheduler.num_tiles(), num_sms);
  launch_kernel(kernel, grid, Kernel::kNumThreads, smem_bytes, stream, params);
}

template <class Kernel>
void launch_flash_fwd(FlashFwdArgs const& args, int num_sms, cudaStream_t stream) {
  launch_flash_fwd_kernel<Kernel>(args, Kernel::Epilogue::make_params(args), 1, num_sms, stream);
}

template <FwdTileConfigId kId>
using PlainFlashFwdKernel = FlashFwdKernel<typename FlashFwdTileConfigFor<kId>::type, EpilogueStoreTma>;

}  // namespace xstage::attention::detail
