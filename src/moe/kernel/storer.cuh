// The storer role (warps 2-3): drains each Linear-2 tile from the staging buffer with 16-byte remote stores
// (st.global through LSA pointers) straight into the combine buffer of each row's source rank — the X-Stage
// traffic — and frees the staging slot; then the storer warps meet and warp 0 publishes the tile once: one
// fence, the rows added to each source's combine_arrived and the tile to l2_done.
#pragma once

#include <cstdint>

#include "moe/kernel/params.hpp"
#include "moe/kernel/protocol.cuh"
#include "moe/kernel/tile_walk.cuh"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

// Storer warp `sw` of kStorerWarps drains the groups of 32 rows b = sw, sw + kStorerWarps, ... of each tile.
// Its code is compiled for its own groups only (kGroups of them, not all 4 under a runtime test) and counts
// each source rank's rows with one ballot per group after the loop, not per row inside it: the loop holds
// only the shuffles, the staged reads and the stores, in batches (below).
template <class Schedule, class C>
__device__ void storer_role(const MegaMoeParams<C>& prm, MegaMoeSharedStorage<C>& smem, int sw) {
  const MoeProblem& pr = prm.problem;
  const SymmetricWindow& w = prm.window;
  const int lane = threadIdx.x % 32, P = pr.P_ranks;
  constexpr int kLanesPerRow = C::kBlockN / 8;      // 16-byte pieces of one staged row: 16 or 32
  constexpr int kRowsPerStep = 32 / kLanesPerRow;   // rows one warp instruction covers: 2 or 1
  constexpr int kGroups = 4 / C::kStorerWarps;      // groups of 32 rows per storer warp
  static_assert(4 % C::kStorerWarps == 0, "the storer warps share a tile's 4 groups of 32 rows evenly");
  const int piece = lane % kLanesPerRow;
  unsigned long long remote_bytes = 0, drain_cycles = 0;
  const Schedule sched = make_device_schedule<Schedule>(prm, smem.first_row);
  int j = 0;  // this CTA's L2 tiles so far
  for (CtaTileWalk<Schedule, C> walk(sched, smem.n_row_last, blockIdx.x); walk.next();) {
    const Tile t = walk.tile;
    if (t.stage != Stage::L2) continue;
    const int slot = j % C::kStagingSlots, phase = (j / C::kStagingSlots) & 1;
    wait_mbarrier(prm.wait, &smem.staging_full[slot], phase, MoeWait::staging_full, slot);
    const long long t_staged = stats_clock();
    if constexpr (kMoeStats) {
      if (sw == 0 && lane == 0) {  // K_act: how many CTAs are draining a tile as this one starts
        const unsigned long long now = atomicAdd(&prm.stats->draining_now, 1ull) + 1;
        atomicAdd(&prm.stats->burst_overlap_sum, now);
        atomicMax(&prm.stats->burst_overlap_max, now);
      }
    }
    // The tile's 128 RowSources, kGroups per lane (row 32·(sw + kStorerWarps·i) + lane in rs[i]), in one round of loads, so the store
    // loop below has no global loads on its path. Read only now: the staging barrier orders them after
    // this row's dispatch (dispatch_ready -> L1 -> l1_done -> this tile's TMA -> consumers -> staging_full);
    // read earlier they could be the previous call's.
    const RowSource* sources = at<const RowSource>(
        prm.local, w.dispatch.row_source_offset(static_cast<std::int64_t>(t.row) * pr.b_m + walk.first_row()));
    RowSource rs[kGroups];
    int all_ranks = 0;  // only for the trace's stamp: its loads have arrived
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {  // L2, not L1: other SMs wrote them during this kernel
      const int2 v = __ldcg(reinterpret_cast<const int2*>(sources + 32 * (sw + C::kStorerWarps * i) + lane));
      rs[i] = RowSource{v.x, v.y};
      all_ranks += v.x;
    }
    const long long t_loaded = stats_clock_after(all_ranks);
    const __nv_bfloat16* staged = smem.staging[slot];
    const std::int64_t col_bytes = static_cast<std::int64_t>(t.n_block) * C::kBlockN * 2 + piece * 16;
    const int cols = C::kHalfL2 ? pr.l2_block_cols(t.n_block) : C::kBlockN;  // a half-full block: its first 128
    const bool piece_exists = piece * 8 < cols;
    // Each lane's row's destination in its source rank's combine buffer, or null for a row past the expert's
    // last (pair < 0): looked up by all 32 lanes at once, so the store loop holds no table load per row.
    unsigned long long dst[kGroups];
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const bool row_exists = rs[i].pair >= 0;
      char* const row = at<char>(prm.peer[row_exists ? rs[i].rank : 0], w.combine.pair_offset(row_exists ? rs[i].pair : 0));
      dst[i] = row_exists ? reinterpret_cast<unsigned long long>(row) : 0ull;
    }
    // kRowsPerStep rows per step, 16 bytes per lane: rows 32·b + kRowsPerStep·s + lane / kLanesPerRow. The steps
    // go in batches of kStoreBatch: all the batch's shuffles, then all its staged reads, then all its stores, so
    // the reads' latencies overlap instead of adding up (the stores' memory clobber keeps a read from moving
    // past an earlier store, so the order written here is the order issued).
    constexpr int kSteps = 32 / kRowsPerStep, kBatch = C::kStoreBatch;
    static_assert(kSteps % kBatch == 0, "whole batches of store steps per group of 32 rows");
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int b = sw + C::kStorerWarps * i;
      if (__ballot_sync(0xffffffffu, dst[i] != 0ull) == 0u) continue;  // 32 padding rows (experts with few rows)
#pragma unroll
      for (int s0 = 0; s0 < kSteps; s0 += kBatch) {
        unsigned long long to[kBatch];
        uint4 v[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) to[k] = __shfl_sync(0xffffffffu, dst[i], kRowsPerStep * (s0 + k) + lane / kLanesPerRow);
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int r = 32 * b + kRowsPerStep * (s0 + k) + lane / kLanesPerRow;
          v[k] = *reinterpret_cast<const uint4*>(staged + r * C::kStagingPitch + piece * 8);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          st_global_v4_if(reinterpret_cast<char*>(to[k]) + col_bytes, v[k], to[k] != 0ull && piece_exists);
      }
    }
    __syncwarp();
    const long long t_issued = stats_clock();
    if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&smem.staging_empty[slot]);
    // This warp's rows of each source q (lane l holds row 32·b + l of each of its groups), for warp 0 to add up.
    std::uint32_t (&rows)[C::kStorerWarps][kMaxEpRanks] = smem.storer_rows[j & 1];
    for (int q = 0; q < P; ++q) {
      unsigned n = 0;
#pragma unroll
      for (int i = 0; i < kGroups; ++i) n += __popc(__ballot_sync(0xffffffffu, rs[i].pair >= 0 && rs[i].rank == q));
      if (lane == 0) rows[sw][q] = n;
      if (kMoeStats && lane == 0 && q != prm.rank) remote_bytes += static_cast<unsigned long long>(n) * cols * 2;
    }
    // The tile is published once (docs/MOE.md, "One release per tile"): the barrier orders the other storer warps'
    // stores and counts before warp 0's lanes, and lane q's fence.acq_rel with its relaxed add is a release of all of
    // them to source q (the fence is cumulative; system scope when P > 1, since a source on another GPU acquires it);
    // lane 0's add to l2_done likewise. The other warps go on to the next tile at once. The counts are double-buffered
    // by tile: another warp writes tile j + 2's only after passing tile j + 1's barrier, which warp 0 reaches after
    // reading tile j's.
    cutlass::arch::NamedBarrier::sync(32 * C::kStorerWarps, kStorerBarrier);
    const long long t0 = stats_clock();
    if (sw == 0 && lane < P) {
      std::uint32_t n = 0;
#pragma unroll
      for (int v = 0; v < C::kStorerWarps; ++v) n += rows[v][lane];
      std::uint32_t* const arrived = at<std::uint32_t>(prm.peer[lane], w.counters.combine_arrived());
      if (P == 1) {  // every store and counter is on this GPU: a GPU-scope release is enough
        fence_acq_rel_gpu();
        if (n > 0) red_relaxed_gpu_add(arrived, n);
      } else {
        fence_acq_rel_sys();
        if (n > 0) red_relaxed_sys_add(arrived, n);
      }
      if (lane == 0) {
        red_relaxed_gpu_add(at<std::uint32_t>(prm.local, w.counters.l2_done(w.ring.slot(t.row))), 1);
        stats_add(&prm.stats->draining_now, ~0ull);  // this CTA's drain is over
      }
    }
    __syncwarp();
    const long long drained = stats_clock();
    drain_cycles += drained - t0;
    if constexpr (kMoeStats) {
      static_assert(C::kStorerWarps == kTracedStorerWarps, "one drain record per storer warp");
      const long long t_released = stats_clock();
      if (lane == 0 && j < prm.trace.capacity) {
        const auto since = [&](long long t) { return static_cast<std::uint32_t>(t - t_staged); };
        prm.trace.drains[(static_cast<std::int64_t>(blockIdx.x) * prm.trace.capacity + j) * kTracedStorerWarps + sw] =
            MoeDrainRecord{t_staged, since(t_loaded), since(t_issued), since(drained), since(t_released)};
      }
    }
    ++j;
  }
  if (lane == 0) {
    if (remote_bytes) stats_add(&prm.stats->peer_bytes, remote_bytes);
    stats_add(&prm.stats->storer_drain_cycles, drain_cycles);
  }
}

// fp8: scales of one 128-wide K block for this thread's two accumulator rows (r0, r0 + 8) and both

}  // namespace xstage::moe
