// The body of launch_megamoe for one Config, included by the per-configuration translation units only:
// TMA descriptors for the window's operands and the weights, the kernel's shared-memory opt-in (once per
// device), and the cooperative cluster launch.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "common/cuda_check.hpp"
#include "common/error.hpp"
#include "moe/kernel/launch.hpp"
#include "moe/kernel/megamoe_kernel.cuh"

namespace xstage::moe::detail {

// A TMA copy of a row-major [rows][K] operand, split over `Multicast` CTAs (each loads its share of the box).
template <class Element, class Tma, class SmemLayout, class TileShape, class Op = cute::SM90_TMA_LOAD, int Multicast = 1>
Tma make_tma(const void* base, std::int64_t rows, int K) {
  using namespace cute;
  auto tensor = make_tensor(make_gmem_ptr(static_cast<Element const*>(base)),
                            make_shape(static_cast<int32_t>(rows), static_cast<int32_t>(K)),
                            make_stride(static_cast<int64_t>(K), _1{}));
  return make_tma_copy(Op{}, tensor, take<0, 2>(SmemLayout{}), TileShape{}, Int<Multicast>{});
}

template <class C>
MegaMoeParams<C> make_params(const MegaMoeLaunch& l) {
  const MoeProblem& pr = l.problem;
  const SymmetricWindow& window = l.window;
  MegaMoeParams<C> prm;
  prm.pr = pr;
  prm.win = window;
  prm.local = l.local;
  for (int r = 0; r < pr.P_ranks; ++r) prm.peer[r] = l.peer[r];
  prm.rank = l.rank;
  prm.tokens = l.tokens;
  prm.D_rows = l.D_rows;
  prm.wave_experts = l.wave_experts;
  prm.wave_lag = l.wave_lag;
  prm.topk_weights = l.topk_weights;
  prm.out = static_cast<__nv_bfloat16*>(l.out);
  prm.wait = l.wait;
  prm.calls = l.calls;
  prm.stats = l.stats;
  prm.trace = l.trace;
  const int EL = pr.E_local(), h = pr.h_hidden, I = pr.h_inter;
  using TmaA = typename C::TmaLoadA;
  using TmaB = typename C::TmaLoadB;
  using LayoutA = typename C::SmemLayoutA;
  using LayoutB = typename C::SmemLayoutB;
  using E = typename C::Element;
  using OpA = typename C::TmaOpA;
  using OpB = typename C::TmaOpB;
  constexpr int kMc = C::kClusterSize;
  constexpr int kMcB = C::kClusterM;
  char* local = l.local;
  prm.tma_a1 = make_tma<E, TmaA, LayoutA, typename C::TileShapeA, OpA, kMc>(local + window.dispatch.region.offset_bytes, window.dispatch.capacity_rows, h);
  prm.tma_b1 = make_tma<E, TmaB, LayoutB, typename C::TileShapeB, OpB, kMcB>(l.W1, static_cast<std::int64_t>(EL) * 2 * I, h);
  prm.tma_a2 = make_tma<E, TmaA, LayoutA, typename C::TileShapeA, OpA, kMc>(local + window.ring.region.offset_bytes,
                                                                             static_cast<std::int64_t>(window.ring.slots) * pr.b_m, I);
  if constexpr (C::kHalfL2) {  // W2 [E_local][h][h_inter], the expert as the third mode (zero fill past h)
    using namespace cute;
    auto w2 = make_tensor(make_gmem_ptr(static_cast<E const*>(l.W2)), make_shape(int32_t(h), int32_t(I), int32_t(EL)),
                          make_stride(int64_t(I), _1{}, int64_t(h) * I));
    prm.tma_b2 = make_tma_copy(SM90_TMA_LOAD{}, w2, take<0, 2>(LayoutB{}), typename C::TileShapeB{}, _1{});
  } else {
    prm.tma_b2 = make_tma<E, TmaB, LayoutB, typename C::TileShapeB, OpB, kMcB>(l.W2, static_cast<std::int64_t>(EL) * h, I);
  }
  if constexpr (C::kClusterM == 2) {  // mixed pairs: the undivided descriptors as well
    using AW = typename C::TmaLoadAWhole;
    using BW = typename C::TmaLoadBWhole;
    prm.tma_a1_whole = make_tma<E, AW, LayoutA, typename C::TileShapeA>(local + window.dispatch.region.offset_bytes, window.dispatch.capacity_rows, h);
    prm.tma_a2_whole = make_tma<E, AW, LayoutA, typename C::TileShapeA>(local + window.ring.region.offset_bytes,
                                                                       static_cast<std::int64_t>(window.ring.slots) * pr.b_m, I);
    prm.tma_b1_whole = make_tma<E, BW, LayoutB, typename C::TileShapeB>(l.W1, static_cast<std::int64_t>(EL) * 2 * I, h);
    prm.tma_b2_whole = make_tma<E, BW, LayoutB, typename C::TileShapeB>(l.W2, static_cast<std::int64_t>(EL) * h, I);
  }
  if constexpr (C::kFp8) {
    // quantize.hpp's weight-scale layout, local experts stacked (layer.hpp): pitch round_up(K/128, 4).
    XSTAGE_REQUIRE(l.W1_scales != nullptr && l.W2_scales != nullptr, "MegaMoE fp8: the weights come without their scales");
    prm.w1_scales = l.W1_scales;
    prm.w2_scales = l.W2_scales;
    prm.w1_scale_pitch = static_cast<int>(round_up(h / kScaleBlock, 4));
    prm.w2_scale_pitch = static_cast<int>(round_up(I / kScaleBlock, 4));
  }
  return prm;
}

template <class Schedule, class C>
void launch_kernel_of(const MegaMoeParams<C>& prm, int grid, cudaStream_t stream) {
  auto kernel = &megamoe_kernel<Schedule, C>;
  constexpr int smem_bytes = static_cast<int>(sizeof(MegaMoeSharedStorage<C>));
  // The shared-memory opt-in is per device and kernel; done once per device.
  static std::atomic<std::uint64_t> opted_in_devices{0};
  int device = 0;
  XSTAGE_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = std::uint64_t(1) << (device % 64);
  if ((opted_in_devices.load(std::memory_order_acquire) & bit) == 0) {
    XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    opted_in_devices.fetch_or(bit, std::memory_order_acq_rel);
  }
  // Cooperative launch: every CTA must be resident at once (they wait on each other's counters); the
  // launch fails with a clear error instead of hanging if they cannot be. CTA pairs as 2 × 1 × 1 clusters.
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeCooperative;
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = C::kClusterSize;
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = 1;
  config.attrs = attrs;
  config.numAttrs = C::kClusterSize > 1 ? 2 : 1;
  XSTAGE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, prm));
}

template <class C>
void launch_megamoe_config(const MegaMoeLaunch& l, cudaStream_t stream) {
  const MegaMoeParams<C> prm = make_params<C>(l);
  if (l.schedule == MoeScheduleKind::interleaved) launch_kernel_of<InterleavedSchedule>(prm, l.grid, stream);
  else launch_kernel_of<ExpertWaveSchedule>(prm, l.grid, stream);
}

}  // namespace xstage::moe::detail
