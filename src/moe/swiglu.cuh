// SwiGLU's activation silu(gate) · up as every device-side MoE layer computes it (the fused kernel's L1
// epilogue and the unfused baseline): fp32 with the fast __expf. The CPU reference (reference/) computes it
// in double: it is the yardstick both are held to.
#pragma once

#if defined(__CUDACC__)
namespace xstage::moe {

__device__ __forceinline__ float swiglu(float gate, float up) { return gate / (1.0f + __expf(-gate)) * up; }

}  // namespace xstage::moe
#endif
