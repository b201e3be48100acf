// The body of launch_megamoe<kId>, included by the per-configuration translation units only: TMA descriptors
// for the window's operands and the weights, the kernel's shared-memory opt-in (once per device), and the
// cooperative cluster launch through launch_kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/device_facts.hpp"
#include "common/launch.cuh"
#include "moe/fp8/fp8.hpp"
#include "moe/kernel/launch.hpp"
#include "moe/kernel/megamoe_kernel.cuh"

namespace xstage::moe {
namespace detail {

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
  MegaMoeParams<C> prm;
  static_cast<MegaMoeLaunch&>(prm) = l;
  const MoeProblem& pr = l.problem;
  const SymmetricWindow& window = l.window;
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
  if constexpr (C::kFp8) {  // quantize.hpp's weight-scale layout, local experts stacked (moe/layer.hpp)
    prm.w1_scale_pitch = static_cast<int>(fp8::weight_scale_pitch(h));
    prm.w2_scale_pitch = static_cast<int>(fp8::weight_scale_pitch(I));
  }
  return prm;
}

// Cooperative launch: every CTA must be resident at once (they wait on each other's counters); the launch
// fails with a clear error instead of hanging if they cannot be. CTA pairs as 2 × 1 × 1 clusters.
template <class Schedule, class C>
void launch_schedule(const MegaMoeParams<C>& prm, cudaStream_t stream) {
  const auto kernel = &megamoe_kernel<Schedule, C>;
  constexpr std::size_t smem_bytes = sizeof(MegaMoeSharedStorage<C>);
  static SharedMemoryOptIn opt_in;
  opt_in.ensure(reinterpret_cast<const void*>(kernel), smem_bytes, device_facts(prm.device));
  launch_kernel(kernel, prm.grid, C::kThreads, smem_bytes, LaunchOptions{C::kClusterSize, true}, stream, prm);
}

}  // namespace detail

template <MegaMoeConfigId kId>
void launch_megamoe(const MegaMoeLaunch& l, cudaStream_t stream) {
  using C = typename MegaMoeConfigFor<kId>::type;
  const MegaMoeParams<C> prm = detail::make_params<C>(l);
  if (l.schedule == MoeScheduleKind::interleaved) detail::launch_schedule<InterleavedSchedule>(prm, stream);
  else detail::launch_schedule<ExpertWaveSchedule>(prm, stream);
}

}  // namespace xstage::moe
