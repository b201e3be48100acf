// Expert weights as the fused layer (and the unfused baseline) read them, in the order that the tile width
// (default_tile_n, problem/problem.hpp) decides. A PyTorch MoE stores Linear-1 as gate_proj and up_proj rows stacked, [E][2·h_inter][h] with
// gate rows first: pack_w1 turns that into the kernel's tile-interleaved order, in which every b_n-row block
// holds b_n/2 gate rows and the matching b_n/2 up rows (problem/layout.hpp, l1_logical_row), so SwiGLU runs
// in each Linear-1 tile's epilogue. W2 [E][h][h_inter] is read as it is.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "moe/problem/problem.hpp"

namespace xstage::moe {

// logical [E_local][2·h_inter][h] (gate rows, then up rows) -> packed, same shape, for tile width b_n.
// Enqueued on `stream`; the two buffers must not overlap.
void pack_w1(const __nv_bfloat16* logical, __nv_bfloat16* packed, int E_local, int h_hidden, int h_inter, int b_n,
             cudaStream_t stream);

}  // namespace xstage::moe
