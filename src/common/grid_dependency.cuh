// Programmatic dependent launch, the device side (Hopper and later; elsewhere both calls do nothing).
//
// A kernel launched with LaunchOptions::early_start (common/launch.cuh) may be scheduled while the kernel before it on
// the stream is still running: from the moment every CTA of that kernel has called allow_dependent_grids() or exited.
// Until it has called wait_for_prior_grids() it must not touch memory that earlier work on the stream writes or reads:
// that call returns once the kernels before it have completed and their writes are visible, so every thread of such a
// kernel calls it before its first such access. Anything that needs no memory of earlier work (barrier set-up,
// descriptor prefetches) may come first; that and the launch itself are what the early start hides.
//
// A kernel calls allow_dependent_grids() where letting the next kernel's CTAs occupy SMs it frees cannot delay its
// own completion: the next kernel's CTAs sit in their wait until this one has finished. Kernels that wait for another
// grid's progress (flags set by a kernel on another stream or GPU) leave it to their exit, so that the next kernel's
// CTAs never hold an SM that grid still needs.
#pragma once

namespace xstage {

__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace xstage
