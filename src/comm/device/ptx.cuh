// Scoped memory operations of the cross-rank protocol, as single PTX instructions. Every fused op in
// xstage (the MegaMoE layer, the fused Ulysses attention epilogue) publishes data to other SMs or other
// GPUs with these, so the memory-model choices live in one place:
//   - a counter that other SMs of this GPU wait on: red.release.gpu, or a relaxed add after a fence.acq_rel that
//     the thread runs anyway; read with ld.acquire.gpu;
//   - a flag or counter a peer GPU waits on (through an LSA pointer): red/st.release.sys, or one fence.acq_rel.sys
//     before relaxed adds to several counters; read with ld.acquire.sys;
//   - data a TMA load will read after a generic-proxy write: fence.proxy.async on both sides.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
namespace xstage::comm {

__device__ __forceinline__ std::uint32_t ld_acquire_gpu(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ std::uint32_t ld_acquire_sys(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Relaxed loads of a flag: several in flight at once (an acquire load waits before the next); a fence.acq_rel
// after them makes the values they saw an acquire.
__device__ __forceinline__ std::uint32_t ld_relaxed_gpu(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ std::uint32_t ld_relaxed_sys(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int ld_relaxed_sys(const int* p) {
  int v;
  asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu_add(std::uint32_t* p, std::uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_sys_add(std::uint32_t* p, std::uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Relaxed adds: after one fence.acq_rel they form release patterns (PTX memory model), so a thread that
// publishes to several counters pays one fence, not one per counter as with red.release.
__device__ __forceinline__ void red_relaxed_sys_add(std::uint32_t* p, std::uint32_t v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_relaxed_gpu_add(std::uint32_t* p, std::uint32_t v) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// An add that is a release for this thread's earlier operations and an acquire for its later ones.
__device__ __forceinline__ std::uint32_t atom_acq_rel_gpu_add(std::uint32_t* p, std::uint32_t v) {
  std::uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void st_release_sys(std::uint32_t* p, std::uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// This thread's earlier memory operations, performed at GPU (system) scope before its later ones.
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
// A 16-byte store under a predicate, in one instruction: a plain `if` around stores in a fully unrolled loop
// lets the compiler duplicate the whole loop for a loop-invariant condition.
__device__ __forceinline__ void st_global_v4_if(void* p, uint4 v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}" ::"l"(p), "r"(v.x),
      "r"(v.y), "r"(v.z), "r"(v.w), "r"(static_cast<int>(pred))
      : "memory");
}
// Orders this thread's generic-proxy global writes before later async-proxy (TMA) accesses, and the
// reader's acquire before its TMA loads: used on both sides of every counter a TMA load waits for.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
// A 32-bit value in the shared memory of CTA `rank` of this cluster (distributed shared memory).
__device__ __forceinline__ int ld_shared_cluster(const int* p, unsigned rank) {
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote = 0;
  int v = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  return v;
}

}  // namespace xstage::comm
#endif  // __CUDACC__
