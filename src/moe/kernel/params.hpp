// What one MegaMoE launch gets (MegaMoeParams, by value in the kernel's parameter space) and what one CTA
// keeps in shared memory (MegaMoeSharedStorage), per Config (kernel/config.hpp).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "comm/device_status.hpp"
#include "moe/kernel/config.hpp"
#include "moe/kernel/launch.hpp"
#include "moe/kernel/stats.hpp"
#include "moe/kernel/status.hpp"
#include "moe/problem/layout.hpp"
#include "moe/problem/problem.hpp"

namespace xstage::moe {

// The launch's values (MegaMoeLaunch, kernel/launch.hpp) as they are, and what the launch derives from them
// for configuration C: the TMA descriptors of the window's operands and the weights.
template <class C>
struct MegaMoeParams : MegaMoeLaunch {
  // fp8: the row pitch of the 128×128 block scales W1_scales and W2_scales (quantize.hpp's layout, local experts
  // stacked: block row e·(N/128) + b of expert e), fp32 [E_local·N/128][pitch]; 0 for bf16.
  int w1_scale_pitch = 0, w2_scale_pitch = 0;
  typename C::TmaLoadA tma_a1, tma_a2;  // dispatch, ring
  typename C::TmaLoadB tma_b1;          // W1
  typename C::TmaLoadW2 tma_b2;         // W2 (per expert with kHalfL2)
  typename C::TmaLoadAWhole tma_a1_whole, tma_a2_whole;  // mixed pairs only: undivided A and B
  typename C::TmaLoadBWhole tma_b1_whole, tma_b2_whole;
};

template <class C>
struct MegaMoeSharedStorage {
  alignas(1024) cute::array_aligned<typename C::Element, cute::cosize_v<typename C::SmemLayoutA>, 1024> a;
  alignas(1024) cute::array_aligned<typename C::Element, cute::cosize_v<typename C::SmemLayoutB>, 1024> b;
  alignas(16) __nv_bfloat16 staging[C::kStagingSlots][C::kBlockM * C::kStagingPitch];
  typename C::Pipeline::SharedStorage pipeline;
  alignas(8) std::uint64_t staging_full[C::kStagingSlots];
  alignas(8) std::uint64_t staging_empty[C::kStagingSlots];
  std::uint32_t storer_rows[2][C::kStorerWarps][kMaxEpRanks];  // a tile's rows per source rank and storer warp (storer.cuh)
  int counts[C::kMaxCounts];                // [P][E_local]: pairs source s sends to local expert e
  int first_row[C::kMaxLocalExperts + 1];   // O_e
  int expert_rows[C::kMaxLocalExperts];     // (token, k) pairs routed to local expert e this call (sum over sources)
  std::uint32_t n_row_last[C::kMaxLocalExperts / 32];  // mixed pairs: bit e = expert e's last row is an N-row
  int routing_ok;                           // every source published this call, and its rows fit
  std::uint32_t epoch;                      // the call this launch runs (comm/device/call_epoch.cuh)
};

#if defined(__CUDACC__)
template <class T>
__device__ __forceinline__ T* at(char* base, std::int64_t offset) { return reinterpret_cast<T*>(base + offset); }
#endif

}  // namespace xstage::moe
