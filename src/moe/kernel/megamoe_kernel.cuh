// The MegaMoE kernel for Hopper (sm_90a), bf16 or fp8 W8A8: dispatch -> Linear-1 -> SwiGLU -> Linear-2 ->
// combine in one persistent, warp-specialized kernel, one CTA per SM (docs/MOE.md, "Hopper kernel mapping").
// This file only composes the roles; each lives in its own header:
//
//   warp 0, lane 0   producer.cuh   TMA producer: walks the schedule, waits for each tile's inputs, loads
//                                   the A and B k-blocks into the pipeline
//   warp 1           dispatch.cuh   pulls token rows from the source ranks over NVLink, dispatch_ready
//   warps 2-3        storer.cuh     drain each Linear-2 tile's staging with remote stores into the source
//                                   rank's combine buffer (the X-Stage traffic), combine_arrived
//   warpgroups 1-2   consumer.cuh   mainloop.cuh (bf16 / fp8 W8A8), then epilogue_l1.cuh (SwiGLU into the
//                                   ring) or epilogue_l2.cuh (into the staging buffer)
//   every thread     reduce.cuh     after its role: wait for this rank's combine rows, top-k weighted sum
//
// kernel/config.hpp decides shapes and registers, kernel/params.hpp what a launch gets, kernel/protocol.cuh
// the cross-rank protocol (src/comm), schedule/ the tile order: the schedule (ExpertWaveSchedule or
// InterleavedSchedule) is a template parameter and only orders tiles; the counters keep every dependency.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "moe/kernel/consumer.cuh"
#include "moe/kernel/dispatch.cuh"
#include "moe/kernel/params.hpp"
#include "moe/kernel/producer.cuh"
#include "moe/kernel/protocol.cuh"
#include "moe/kernel/reduce.cuh"
#include "moe/kernel/storer.cuh"

namespace xstage::moe {


template <class Schedule, class C>
__global__ void __launch_bounds__(C::kThreads, 1) megamoe_kernel(CUTE_GRID_CONSTANT MegaMoeParams<C> const prm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) char smem_raw[];
  MegaMoeSharedStorage<C>& smem = *reinterpret_cast<MegaMoeSharedStorage<C>*>(smem_raw);
  const MoeProblem& pr = prm.problem;
  const SymmetricWindow& w = prm.window;
  const int P = pr.P_ranks, EL = pr.E_local();

  // 1. Publish this call (CTA 0) and wait until every source has published its own.
  if (threadIdx.x == 0) {
    stats_max(&prm.stats->kernel_start_not_ns, ~static_cast<unsigned long long>(global_timer_ns()));
    if constexpr (kMoeStats) {
      prm.trace.anchors[blockIdx.x].start_clock = static_cast<unsigned long long>(clock64());
      prm.trace.anchors[blockIdx.x].start_ns = global_timer_ns();
    }
    const std::uint32_t epoch = comm::current_call(prm.calls);
    smem.epoch = epoch;
    if (blockIdx.x == 0) {
      __threadfence_system();
      st_release_sys(at<std::uint32_t>(prm.local, w.epochs.send_ready()), epoch);
    }
    bool ok = true;
    for (int s = 0; s < P && ok; ++s)
      ok = wait_counter<true>(prm.wait, at<const std::uint32_t>(prm.peer[s], w.epochs.send_ready()), epoch,
                              MoeWait::peer_send_ready, s);
    smem.routing_ok = ok;
    cute::prefetch_tma_descriptor(prm.tma_a1.get_tma_descriptor());
    cute::prefetch_tma_descriptor(prm.tma_b1.get_tma_descriptor());
    cute::prefetch_tma_descriptor(prm.tma_a2.get_tma_descriptor());
    cute::prefetch_tma_descriptor(prm.tma_b2.get_tma_descriptor());
    if constexpr (C::kClusterM == 2) {
      cute::prefetch_tma_descriptor(prm.tma_a1_whole.get_tma_descriptor());
      cute::prefetch_tma_descriptor(prm.tma_b1_whole.get_tma_descriptor());
      cute::prefetch_tma_descriptor(prm.tma_a2_whole.get_tma_descriptor());
      cute::prefetch_tma_descriptor(prm.tma_b2_whole.get_tma_descriptor());
    }
  }
  __syncthreads();
  // 2. Counts of every source for the local experts, and the scheduler rows O_e.
  // A source that never published (the wait failed) leaves the routing unknown: no rows, no tiles.
  for (int i = threadIdx.x; i < P * EL; i += blockDim.x)
    smem.counts[i] = smem.routing_ok ? ld_relaxed_sys(at<const int>(prm.peer[i / EL], w.send.count_offset(pr.global_expert(prm.rank, i % EL)))) : 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::int64_t acc = 0;
    for (int e = 0; e < C::kMaxLocalExperts / 32; ++e) smem.n_row_last[e] = 0;
    for (int e = 0; e < EL; ++e) {
      smem.first_row[e] = static_cast<int>(acc);
      std::int64_t rows = 0;
      for (int s = 0; s < P; ++s) rows += smem.counts[s * EL + e];
      const int rows_e = static_cast<int>(rows < (1 << 30) ? rows : (1 << 30)), blocks = m_blocks(rows_e, pr.b_m);
      smem.expert_rows[e] = rows_e;
      acc += blocks;
      if (C::kClusterM == 2 && blocks > 0 && !MixedPairTiling::m_row(rows_e, blocks - 1)) smem.n_row_last[e / 32] |= 1u << (e % 32);
    }
    smem.first_row[EL] = static_cast<int>(acc);
    if (!w.dispatch.fits(acc * pr.b_m)) {
      moe_device_fail(prm.wait, MoeWait::capacity, -1, static_cast<std::uint32_t>(acc * pr.b_m),
                      static_cast<std::uint32_t>(w.dispatch.capacity_rows));
      for (int e = 0; e <= EL; ++e) smem.first_row[e] = 0;  // run nothing rather than write out of bounds
      smem.routing_ok = 0;
    }
    for (int slot = 0; slot < C::kStagingSlots; ++slot) {
      cutlass::arch::ClusterBarrier::init(&smem.staging_full[slot], C::kConsumerThreads);
      cutlass::arch::ClusterBarrier::init(&smem.staging_empty[slot], C::kStorerWarps);
    }
  }
  typename C::Pipeline::Params pipeline_params;
  pipeline_params.transaction_bytes = C::kStageBytes;
  pipeline_params.role = threadIdx.x < 128 ? C::Pipeline::ThreadCategory::Producer : C::Pipeline::ThreadCategory::Consumer;
  pipeline_params.is_leader = threadIdx.x == 0;
  pipeline_params.num_consumers = C::kConsumerThreads;
  typename C::Pipeline pipeline(smem.pipeline, pipeline_params, typename C::ClusterShape{});
  cutlass::arch::fence_barrier_init();
  if constexpr (C::kClusterSize > 1) {
    // A CTA pair arrives on, and multicasts into, the other CTA's barriers: both must be initialised first.
    // And both must run the same tiles, or one waits forever for the other's half of A: if either CTA lost
    // the routing (a peer's send_ready wait timed out in one CTA but not the other), neither runs any.
    cute::cluster_sync();
    if (threadIdx.x == 0 && smem.routing_ok && !ld_shared_cluster(&smem.routing_ok, cute::block_rank_in_cluster() ^ 1u)) {
      smem.routing_ok = 0;
      for (int e = 0; e <= EL; ++e) smem.first_row[e] = 0;
    }
    __syncthreads();
  } else {
    __syncthreads();
  }

  // 3. Roles, then 4. the top-k reduction. The reduction code follows both warpgroups' branches, so it is
  // compiled for the smaller setmaxnreg budget (warpgroup 0's 56 or 72 registers): 4 rows in flight, which
  // fit. Measured alternatives (docs/MOE.md, "The top-k reduction"): 8 rows in
  // flight made the tail 2x longer; handing registers back with setmaxnreg before it made compute-sanitizer
  // racecheck run past its bound; a reduction inside each branch made ptxas spill more in the fp8 kernels
  // (8.9 vs 7.7 ms).
  const int warp = threadIdx.x / 32;
  if (warp < 4) {
    cutlass::arch::warpgroup_reg_dealloc<C::kProducerRegisters>();
    if (warp == 0) {
      if (threadIdx.x == 0) producer_role<Schedule>(prm, smem, pipeline);
    } else if (warp <= C::kDispatchWarps) {
      dispatch_role(prm, smem, warp - 1);
    } else {
      storer_role<Schedule>(prm, smem, warp - 1 - C::kDispatchWarps);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<C::kConsumerRegisters>();
    consumer_role<Schedule>(prm, smem, pipeline, threadIdx.x - 128);
  }
  const long long tail_start = await_combine_then_reduce<4>(prm, smem);

  // 5. The last CTA publishes the call as done and tells every peer that this rank has finished reading its
  // data of this call.
  __syncthreads();
  if (threadIdx.x == 0) {
    stats_add(&prm.stats->tail_cycles, static_cast<unsigned long long>(stats_clock() - tail_start));
    stats_max(&prm.stats->kernel_end_ns, static_cast<unsigned long long>(global_timer_ns()));
    const std::uint32_t epoch = smem.epoch;
    if (comm::finish_cta(prm.calls, epoch, gridDim.x)) {
      __threadfence_system();
      for (int s = 0; s < P; ++s)
        if (s != prm.rank) st_release_sys(at<std::uint32_t>(prm.peer[s], w.epochs.peer_finished(prm.rank)), epoch);
    }
  }
#endif
}

}  // namespace xstage::moe

