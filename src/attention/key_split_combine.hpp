// The host side of the split tail (key_split.hpp): the stream-ordered workspace of a split launch, and the combine
// kernel that merges each split tile's parts into the bf16 output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/flash_fwd_params.hpp"
#include "attention/key_split.hpp"
#include "attention/tile_scheduler.hpp"

namespace xstage::attention {

// `bytes` of workspace ordered on `stream`, from a memory pool of the current device that xstage keeps for these (its
// memory stays reserved between calls); under CUDA-graph capture, memory the graph owns. Free with
// key_split_workspace_free on the same stream.
float* key_split_workspace_alloc(std::int64_t bytes, cudaStream_t stream);
void key_split_workspace_free(float* workspace, cudaStream_t stream);

struct KeySplitCombine {
  KeySplit split;
  StaticPersistentTileScheduler scheduler;  // the forward kernel's: a tile's (m_block, head, batch)
  int block_m = 0;
  int head_dim = 0;
  int seqlen_q = 0;
  int heads = 0;
  const float* partials = nullptr;  // the forward kernel's parts (FlashFwdKernel::store_part)
  void* o = nullptr;                // bf16 [batch, seq, heads, head_dim] with strides o_strides
  BmhdStrides o_strides;
  float* lse = nullptr;  // optional [batch, heads, seqlen_q]
};

// One CTA per split tile and 256 of its (row, 8 columns) items, one a thread, launched to start early: it waits for the
// forward kernel before it reads the parts, and loads all of an item's parts at once where there are at most four.
void launch_key_split_combine(KeySplitCombine const& c, cudaStream_t stream);

}  // namespace xstage::attention
