// One CTA's tiles in schedule order, and the counter targets its waits use: the same code runs in the
// MegaMoE kernel (each of a CTA's producer, consumers and storers walks it independently, with no shared
// state) and in the CPU lockstep simulation of every CTA (schedule_host.hpp), so a wrong target is caught
// on the CPU.
//
// The schedule runs over instances (one per cluster; scheduler.hpp); CTA `cta` of the launch is instance
// cta / cluster size and takes its share of each pair tile: its n-block (N-pairs, ClusterTiling), or with
// mixed pairs its half of an M-row or its n-block of an N-row (MixedPairTiling; empty pair tiles skipped by
// both CTAs).
//
//   for (TileWalk<Schedule, kClusterN, kClusterM> walk(sched, n_row_last, cta); walk.next();) use(walk.tile);
#pragma once

#include <cstdint>
#include <type_traits>

#include "moe/problem/layout.hpp"
#include "moe/problem/problem.hpp"
#include "moe/schedule/scheduler.hpp"

namespace xstage::moe {

// The schedule over a launch of `ctas` CTAs in clusters of kClusterN × kClusterM: one instance per cluster,
// on pair tiles (P / kClusterN per row) when the cluster is an N-pair. `first_row` is the owner's O_e.
template <class Schedule, int kClusterN, int kClusterM>
XSTAGE_HD Schedule make_cluster_schedule(const MoeProblem& pr, const int* first_row, int ctas, int D_rows, int wave_experts,
                                         int wave_lag) {
  const TileStreams streams = ClusterTiling{kClusterN}.pair_streams(
      TileStreams{SchedulerRows{first_row, pr.E_local()}, pr.P1_l1_n_blocks(), pr.P2_l2_n_blocks()});
  const int instances = ctas / (kClusterN * kClusterM);
  if constexpr (std::is_same_v<Schedule, InterleavedSchedule>) {
    return InterleavedSchedule{streams, D_rows, instances};
  } else {
    return ExpertWaveSchedule{streams, wave_experts, instances, wave_lag};
  }
}

template <class Schedule, int kClusterN, int kClusterM>
struct TileWalk {
  static constexpr int kClusterSize = kClusterN * kClusterM;
  const Schedule& sched;
  const std::uint32_t* n_row_last;  // mixed pairs: bit e = expert e's last row is an N-row (else unused)
  int cta_in_cluster;
  typename Schedule::State state;
  Tile tile;
  int half = 0;       // the 128-row half of the scheduler row this CTA runs (mixed pairs; else 0)
  bool m_row = true;  // mixed pairs: the pair shares B (an M-row), else A (an N-row)

  XSTAGE_HD TileWalk(const Schedule& s, const std::uint32_t* n_row_last_bits, int cta)
      : sched(s), n_row_last(n_row_last_bits), cta_in_cluster(cta % kClusterSize), state(s.start(cta / kClusterSize)) {}

  XSTAGE_HD bool next() {
    for (;;) {
      const auto step = sched.next(state);
      state = step.next;
      if constexpr (kClusterM == 1) {
        tile = ClusterTiling{kClusterN}.cta_tile(step.tile, cta_in_cluster);
        return tile.valid();
      } else {
        if (!step.tile.valid()) {
          tile = step.tile;
          return false;
        }
        const int e = step.tile.expert;
        m_row = step.tile.row + 1 < sched.streams.rows.first_row[e + 1] || !((n_row_last[e / 32] >> (e % 32)) & 1u);
        if (MixedPairTiling::cta_tile(step.tile, cta_in_cluster, m_row,
                                      step.tile.stage == Stage::L1 ? sched.streams.P1 : sched.streams.P2, tile, half))
          return true;
      }
    }
  }

  // CTA tiles that finish the L1 stage of the current tile's scheduler row: what its L2 tiles wait for on
  // l1_done. The schedule runs on pair streams (P1 / kClusterN pair tiles per row), the counters count CTA
  // tiles. Mixed pairs run on the plain ring (one slot per row, generation 0), where the kind of the row
  // alone gives it.
  XSTAGE_HD std::uint32_t l1_target(int slots) const {
    if constexpr (kClusterM == 1)
      return l1_done_target(tile.row, slots, ClusterTiling{kClusterN}.cta_tiles_per_row(sched.streams.P1));
    else
      return MixedPairTiling::cta_tiles_per_row(m_row, sched.streams.P1);
  }
  // The first of this CTA's rows inside the scheduler row (mixed pairs: 0 or 128).
  XSTAGE_HD int first_row() const { return half * MixedPairTiling::kHalfRows; }
};

}  // namespace xstage::moe
