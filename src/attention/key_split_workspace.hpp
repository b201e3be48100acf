// The host side of the split tail (key_split.hpp): the stream-ordered workspace of a split launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/key_split.hpp"

namespace xstage::attention {

// The workspace `w` ordered on `stream`, its arrival counts zeroed, from a memory pool of the current device that
// xstage keeps for these (its memory stays reserved between calls); under CUDA-graph capture, memory the graph owns.
// Free with key_split_workspace_free on the same stream once the kernel that uses it is enqueued.
float* key_split_workspace_alloc(KeySplitWorkspace const& w, cudaStream_t stream);
void key_split_workspace_free(float* workspace, cudaStream_t stream);

}  // namespace xstage::attention
