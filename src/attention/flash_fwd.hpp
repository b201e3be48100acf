// Public entry point of the Hopper FlashAttention forward kernel.
//
//   O = softmax(softmax_scale * Q K^T) V  per (batch, head), full (non-causal) attention,
//   bf16 Q, K, V, O in [batch, seq, heads, head_dim] with the given strides, fp32 accumulation,
//   optional fp32 log-sum-exp [batch, heads, seqlen_q]. head_dim 64 or 128. Needs an sm_90 GPU.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "attention/flash_fwd_params.hpp"
#include "attention/tile_shapes.hpp"
#include "attention/ulysses/destinations.hpp"
#include "common/device_facts.hpp"

namespace xstage::attention {

// Throws xstage::InputError naming the first problem found (sizes, head dim, strides, alignment).
void validate_flash_fwd_args(FlashFwdArgs const& args);

// Validates, then launches on `stream` (asynchronous) on the current device. Throws xstage::Error on CUDA errors.
// Where the launch splits its last partial wave by key range (args.key_split, key_split.hpp), a small combine kernel
// follows on the same stream, with a workspace allocated and freed in stream order (capturable in a CUDA graph).
void flash_attention_forward(FlashFwdArgs const& args, cudaStream_t stream = nullptr);
// The same where the caller has made `device` the current device (no CUDA query for it).
void flash_attention_forward(FlashFwdArgs const& args, DeviceFacts const& device, cudaStream_t stream);

// The fused Ulysses forward (epilogue_all_to_all.hpp): the same kernel on this rank's head-sharded Q, K, V
// ([batch, M, H/P, d]: args.problem.heads = H/P, args.o and args.lse unused), each finished output tile
// stored into the output window of the rank that owns its rows, by `path`. With `inputs` set, Q, K and V are
// still arriving: the kernel waits for each input chunk before it loads its rows (the fused_both path of
// ulysses/layer.hpp). Validates `args` against `dst.shape`, then launches on `stream`, to start early: the kernel may
// be scheduled while the kernel before it on the stream finishes, and waits for that kernel before it touches memory
// (common/grid_dependency.cuh). flash_attention_forward launches as usual, so that its timings compare with other
// libraries' kernels; from its last tiles on it lets a following kernel that starts early take the SMs it frees.
void flash_attention_forward_all_to_all(FlashFwdArgs const& args, AllToAllDestinations const& dst, A2AStorePath path,
                                        cudaStream_t stream, InputArrivals const& inputs = {});

// The tile configuration flash_attention_forward picks for `problem` on a GPU with `num_sms` SMs.
FwdTileConfigId flash_fwd_tile_config(FlashFwdProblem const& problem, int num_sms);

// The split tail flash_attention_forward makes for `args` in configuration `config` on `num_sms` SMs (key_split.hpp;
// inactive: none).
KeySplit flash_fwd_key_split(FlashFwdArgs const& args, FwdTileConfigId config, int num_sms);

// For reports: "b_m=128 b_n=192 stages=3 (2 consumer warpgroups)".
std::string describe(FwdTileShape const& shape);

namespace detail {
// Instantiated for each FwdTileConfigId in a translation unit of its own (flash_fwd_launch.cuh has the body).
// `device`: the current device.
template <FwdTileConfigId kId>
void launch_flash_fwd_config(FlashFwdArgs const& args, DeviceFacts const& device, cudaStream_t stream);
// The same for the fused Ulysses forward, both store paths (flash_fwd_all_to_all.cuh has the body).
template <FwdTileConfigId kId>
void launch_flash_fwd_a2a_config(FlashFwdArgs const& args, AllToAllDestinations const& dst, A2AStorePath path,
                                 InputArrivals const& inputs, DeviceFacts const& device, cudaStream_t stream);
}  // namespace detail

}  // namespace xstage::attention
