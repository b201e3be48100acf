// The CUTLASS SM90 pipelines' mbarrier waits, bounded (comm/device/bounded_wait.cuh has the discipline): a
// consumer waiting for a stage's data (full barrier), a producer waiting for a free stage (empty barrier).
// A wait that gives up leaves the pipeline's books balanced (the producer still arms the stage), so the
// kernel winds down without a second hang; its data are garbage by then, and the op reports the failure.
#pragma once

#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "comm/device/bounded_wait.cuh"

#if defined(__CUDACC__)
namespace xstage::comm {

// `what` names the pipeline in the failure record, the index is the stage and the target its phase.
template <class Pipeline, class State>
__device__ __forceinline__ void bounded_consumer_wait(Pipeline& pipeline, State state, const WaitContext& ctx, int what) {
  auto token = pipeline.consumer_try_wait(state);
  if (token != cutlass::BarrierStatus::WaitDone) {
    const std::uint64_t deadline = global_timer_ns() + ctx.timeout_ns;
    for (std::uint32_t tries = 0; token != cutlass::BarrierStatus::WaitDone; ++tries) {
      token = pipeline.consumer_try_wait(state);
      if ((tries & 7u) == 7u && token != cutlass::BarrierStatus::WaitDone) {
        if (op_aborted(ctx)) return;
        if (global_timer_ns() > deadline) {
          device_fail(ctx, what, static_cast<int>(state.index()), 0u, state.phase());
          return;
        }
      }
    }
  }
}

template <class Pipeline, class State>
__device__ __forceinline__ void bounded_producer_acquire(Pipeline& pipeline, State state, const WaitContext& ctx, int what) {
  auto token = pipeline.producer_try_acquire(state);
  if (token != cutlass::BarrierStatus::WaitDone) {
    const std::uint64_t deadline = global_timer_ns() + ctx.timeout_ns;
    for (std::uint32_t tries = 0; token != cutlass::BarrierStatus::WaitDone; ++tries) {
      token = pipeline.producer_try_acquire(state);
      if ((tries & 7u) == 7u && token != cutlass::BarrierStatus::WaitDone) {
        if (op_aborted(ctx) || global_timer_ns() > deadline) {
          if (!op_aborted(ctx)) device_fail(ctx, what, static_cast<int>(state.index()), 0u, state.phase());
          token = cutlass::BarrierStatus::WaitDone;  // go on: arm the stage so the pipeline's books stay balanced
        }
      }
    }
  }
  pipeline.producer_acquire(state, token);  // the leader arms the full barrier with the stage's bytes
}

}  // namespace xstage::comm
#endif  // __CUDACC__
