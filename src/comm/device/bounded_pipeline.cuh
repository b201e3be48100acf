// The CUTLASS SM90 pipelines' mbarrier waits, bounded (comm/device/bounded_wait.cuh has the discipline): a
// consumer waiting for a stage's data (full barrier), a producer waiting for a free stage (empty barrier).
// A consumer wait that gives up goes on (its data are garbage by then, and the op reports the failure); a producer
// acquire that gives up arms nothing and says so, and the producer stops loading: arming a stage whose previous
// load is still pending would arrive on an mbarrier whose phase has no arrival left to take, which the hardware
// answers with an exception that ends the whole CUDA context (measured on the H200: "unspecified launch failure"
// after a 1 us timeout), where a recorded failure leaves it usable. The other roles' bounded waits then end at
// once (op_aborted), so the kernel winds down without a second hang.
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

// True: the stage is free and armed with its bytes (the leader's arrive_and_expect_tx). False: the wait gave up
// (this one timed out, or another wait failed first) and nothing was armed: the caller must not load the stage.
template <class Pipeline, class State>
[[nodiscard]] __device__ __forceinline__ bool bounded_producer_acquire(Pipeline& pipeline, State state, const WaitContext& ctx,
                                                                      int what) {
  auto token = pipeline.producer_try_acquire(state);
  if (token != cutlass::BarrierStatus::WaitDone) {
    const std::uint64_t deadline = global_timer_ns() + ctx.timeout_ns;
    for (std::uint32_t tries = 0; token != cutlass::BarrierStatus::WaitDone; ++tries) {
      token = pipeline.producer_try_acquire(state);
      if ((tries & 7u) == 7u && token != cutlass::BarrierStatus::WaitDone) {
        if (op_aborted(ctx)) return false;
        if (global_timer_ns() > deadline) {
          device_fail(ctx, what, static_cast<int>(state.index()), 0u, state.phase());
          return false;
        }
      }
    }
  }
  pipeline.producer_acquire(state, token);  // the leader arms the full barrier with the stage's bytes
  return true;
}

}  // namespace xstage::comm
#endif  // __CUDACC__
