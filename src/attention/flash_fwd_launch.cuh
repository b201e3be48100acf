// Host side of one kernel configuration: TMA descriptors from the user's strides, grid size from the
// tile count and the SM count, dynamic shared memory, launch. Included only by the per-configuration
// translation units (generated from tile_shapes.hpp's list).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/epilogue_store.hpp"
#include "attention/flash_fwd.hpp"
#include "attention/flash_fwd_kernel.hpp"
#include "attention/flash_fwd_params.hpp"
#include "attention/key_split_combine.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/launch.cuh"

namespace xstage::attention::detail {

// `m_block_stride`: the tile scheduler's m-block order (1: in order; tile_scheduler.hpp). `device`: the current one.
// With `inputs` set (inputs that arrive while the kernel runs) the tiles go in arrival order instead, on the SMs the
// inputs' pusher leaves. `options.early_start`: the kernel may start while the one before it finishes (it waits for
// it before its first load; common/grid_dependency.cuh). `split` (kernels built with kKeySplit): the split tail, whose
// parts go to `partials`; its launch has one CTA per SM. Returns the tile scheduler the kernel walks.
template <class Kernel>
StaticPersistentTileScheduler launch_flash_fwd_kernel(FlashFwdArgs const& args, typename Kernel::Epilogue::Params const& epilogue, int m_block_stride,
                             DeviceFacts const& device, cudaStream_t stream, InputArrivals const& inputs = {},
                             LaunchOptions options = {}, KeySplit split = {}, float* partials = nullptr) {
  using Config = typename Kernel::Config;
  const FlashFwdProblem& p = args.problem;
  const bool arrival_order = inputs.flags != nullptr;

  typename Kernel::Params params{
      Kernel::Mainloop::make_params(args, inputs), epilogue,
      StaticPersistentTileScheduler{ceil_div(p.seqlen_q, Config::kBlockM), p.heads, p.batch, arrival_order ? 1 : m_block_stride, arrival_order},
      split, partials};

  auto kernel = &flash_fwd_sm90_kernel<Kernel>;
  constexpr int smem_bytes = Kernel::kSharedStorageBytes;
  static SharedMemoryOptIn opt_in;
  opt_in.ensure(reinterpret_cast<const void*>(kernel), smem_bytes, device);

  const int grid = split.active() ? split.ctas
                                  : StaticPersistentTileScheduler::grid_size(params.scheduler.num_tiles(), device.sm_count - inputs.reserved_sms);
  launch_kernel(kernel, grid, Kernel::kNumThreads, smem_bytes, options, stream, params);
  return params.scheduler;
}

// The plain forward: where the launch splits its tail (key_split.hpp), then the combine kernel, both on `stream` with
// a stream-ordered workspace.
template <class Kernel>
void launch_flash_fwd(FlashFwdArgs const& args, FwdTileConfigId config, DeviceFacts const& device, cudaStream_t stream) {
  using Config = typename Kernel::Config;
  const FlashFwdProblem& p = args.problem;
  const KeySplit split = flash_fwd_key_split(args, config, device.sm_count);
  const auto epilogue = Kernel::Epilogue::make_params(args);
  if (!split.active()) {
    launch_flash_fwd_kernel<Kernel>(args, epilogue, 1, device, stream);
    return;
  }
  float* partials = key_split_workspace_alloc(key_split_workspace_bytes(split.ctas, Config::kBlockM, Config::kHeadDim), stream);
  const StaticPersistentTileScheduler scheduler = launch_flash_fwd_kernel<Kernel>(args, epilogue, 1, device, stream, {}, {}, split, partials);
  KeySplitCombine combine{split, scheduler, Config::kBlockM, Config::kHeadDim, p.seqlen_q, p.heads, partials, args.o, p.o, args.lse};
  launch_key_split_combine(combine, stream);
  key_split_workspace_free(partials, stream);
}

template <FwdTileConfigId kId>
using PlainFlashFwdKernel = FlashFwdKernel<typename FlashFwdTileConfigFor<kId>::type, EpilogueStoreTma, false, true>;

template <FwdTileConfigId kId>
void launch_flash_fwd_config(FlashFwdArgs const& args, DeviceFacts const& device, cudaStream_t stream) {
  launch_flash_fwd<PlainFlashFwdKernel<kId>>(args, kId, device, stream);
}

}  // namespace xstage::attention::detail
