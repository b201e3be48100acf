// The two schedules: every tile exactly once, every dependency kept, no deadlock, how they spread the
// L2 tiles, and the lead D against D_knee — over seeded random problems.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "model/moe.hpp"
#include "moe/problem/layout.hpp"
#include "moe/schedule/schedule_host.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

using test::first_rows_from_counts;
using test::random_expert_rows;

// Every (stage, row, n) of both streams exactly once over all instances; coordinates consistent.
template <class Schedule>
void expect_exactly_once(const Schedule& s, const std::vector<int>& O, const std::string& what) {
  const TileStreams& st = s.streams;
  std::map<std::tuple<int, int, int>, int> seen;
  for (int g = 0; g < s.Gs; ++g) {
    int last_k1 = -1, last_k2 = -1;
    for (const Tile& t : instance_sequence(s, g)) {
      ++seen[{static_cast<int>(t.stage), t.row, t.n_block}];
      ASSERT_GE(t.row, 0) << what;
      ASSERT_LT(t.row, st.rows.num_rows()) << what;
      ASSERT_GE(t.expert, 0) << what;
      ASSERT_LT(t.expert, st.rows.E_local) << what;
      EXPECT_GE(t.row, O[t.expert]) << what;
      EXPECT_LT(t.row, O[t.expert + 1]) << what << " (row outside its expert)";
      EXPECT_EQ(t.m_block, t.row - O[t.expert]) << what;
      ASSERT_GE(t.n_block, 0) << what;
      EXPECT_LT(t.n_block, t.stage == Stage::L1 ? st.P1 : st.P2) << what;
      // Algorithm 1 walks each stream forward: tile indices strictly increase per stream. (The wave
      // schedule walks its own global order, L1 n-major inside a wave; the simulations check its
      // dependencies and progress.)
      if constexpr (std::is_same_v<Schedule, InterleavedSchedule>) {
        const int k = t.row * (t.stage == Stage::L1 ? st.P1 : st.P2) + t.n_block;
        int& last = t.stage == Stage::L1 ? last_k1 : last_k2;
        EXPECT_GT(k, last) << what;
        last = k;
      }
    }
  }
  const int rows = st.rows.num_rows();
  EXPECT_EQ(static_cast<int>(seen.size()), rows * (st.P1 + st.P2)) << what;
  for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << what << " tile emitted " << n << " times";
}

// From the runs alone (not the simulator's own flag): every L2 tile starts after all L1 tiles of its row
// ended, and an L1 tile reusing a ring slot starts after all L2 tiles of the slot's previous row ended.
void expect_dependencies(const SimulationResult& r, const TileStreams& st, int S, const std::string& what) {
  const int rows = st.rows.num_rows();
  std::vector<long> l1_end(rows, -1), l2_end(rows, -1);
  std::vector<int> l1_n(rows, 0), l2_n(rows, 0);
  for (const auto& runs : r.runs)
    for (const TileRun& t : runs) {
      auto& end = t.tile.stage == Stage::L1 ? l1_end : l2_end;
      end[t.tile.row] = std::max(end[t.tile.row], t.end);
      ++(t.tile.stage == Stage::L1 ? l1_n : l2_n)[t.tile.row];
    }
  for (int p = 0; p < rows; ++p) {
    ASSERT_EQ(l1_n[p], st.P1) << what;
    ASSERT_EQ(l2_n[p], st.P2) << what;
  }
  for (const auto& runs : r.runs)
    for (const TileRun& t : runs) {
      if (t.tile.stage == Stage::L2) EXPECT_GE(t.start, l1_end[t.tile.row]) << what << " L2 before its L1 row";
      if (t.tile.stage == Stage::L1 && t.tile.row >= S) EXPECT_GE(t.start, l2_end[t.tile.row - S]) << what << " ring slot reused early";
    }
}

MoeProblem problem_with(int E_local, int P1, int P2) {
  MoeProblem p = test::small_problem(1, E_local, 1, 1024);
  p.h_inter = P1 * p.b_n / 2;
  p.h_hidden = P2 * p.b_n;
  return p;
}

TEST(MoeScheduler, EveryTileExactlyOnceOverRandomProblems) {
  std::mt19937_64 rng(20260101);
  for (int trial = 0; trial < 150; ++trial) {
    const int E_local = 1 + static_cast<int>(rng() % 9);
    const int P1 = 1 + static_cast<int>(rng() % 6), P2 = 1 + static_cast<int>(rng() % 6);
    const MoeProblem pr = problem_with(E_local, P1, P2);
    const std::vector<int> O = first_rows_from_counts(random_expert_rows(rng, E_local, pr.b_m, 4), pr.b_m);
    const int Gs = std::vector<int>{1, 2, 3, 7, 16, 132}[rng() % 6];
    const int D = 1 + static_cast<int>(rng() % 6);
    const int W = 1 + static_cast<int>(rng() % E_local);
    const std::string what = "trial " + std::to_string(trial) + " E_local=" + std::to_string(E_local) + " P1=" +
                             std::to_string(P1) + " P2=" + std::to_string(P2) + " Gs=" + std::to_string(Gs) +
                             " D=" + std::to_string(D) + " W=" + std::to_string(W) + " rows=" + std::to_string(O.back());
    expect_exactly_once(make_interleaved_schedule(pr, O.data(), D, Gs), O, "interleaved " + what);
    for (int lag : {0, 1, 2}) expect_exactly_once(make_expert_wave_schedule(pr, O.data(), W, Gs, lag), O, "wave lag " + std::to_string(lag) + " " + what);
  }
}

// CTA pairs (ClusterTiling, c = 2): the schedule on pair tiles, CTA r of each cluster taking n = 2·n' + r.
// Every CTA tile exactly once over all clusters and both CTAs, and the two CTAs of a cluster run the same
// rows and stages in the same order (they share each A k-block, so they must). And each row's stage ends
// after as many CTA tiles as the counter target the kernel derives from the pair streams
// (`cta_tiles_per_row`): a target below that lets an L2 tile read activations of L1 tiles still running.
template <class Schedule>
void expect_pairs_cover_every_tile(Schedule s, const std::string& what) {
  const ClusterTiling cl{2};
  ASSERT_TRUE(cl.divides(s.streams)) << what;
  const TileStreams cta_streams = s.streams;
  s.streams = cl.pair_streams(s.streams);
  std::map<std::tuple<int, int, int>, int> seen;
  std::map<std::pair<int, int>, int> per_row;  // (stage, row) -> CTA tiles
  for (int g = 0; g < s.Gs; ++g) {
    const std::vector<Tile> pair_tiles = instance_sequence(s, g);
    for (const Tile& pt : pair_tiles) {
      const Tile t0 = cl.cta_tile(pt, 0), t1 = cl.cta_tile(pt, 1);
      EXPECT_EQ(t0.row, t1.row) << what;
      EXPECT_EQ(t0.stage, t1.stage) << what;
      EXPECT_EQ(t1.n_block, t0.n_block + 1) << what;
      for (const Tile& t : {t0, t1}) {
        EXPECT_LT(t.n_block, t.stage == Stage::L1 ? cta_streams.P1 : cta_streams.P2) << what;
        ++seen[{static_cast<int>(t.stage), t.row, t.n_block}];
        ++per_row[{static_cast<int>(t.stage), t.row}];
      }
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), cta_streams.rows.num_rows() * (cta_streams.P1 + cta_streams.P2)) << what;
  for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << what << " CTA tile emitted " << n << " times";
  for (const auto& [key, n] : per_row)
    EXPECT_EQ(n, cl.cta_tiles_per_row(key.first == static_cast<int>(Stage::L1) ? s.streams.P1 : s.streams.P2))
        << what << " row " << key.second << ": the counter target is not the row's CTA tile count";
}

TEST(MoeScheduler, ClusterPairsCoverEveryTileOnceInLockstep) {
  std::mt19937_64 rng(20261130);
  for (int trial = 0; trial < 60; ++trial) {
    const int E_local = 1 + static_cast<int>(rng() % 9);
    const int P1 = 2 * (1 + static_cast<int>(rng() % 4)), P2 = 2 * (1 + static_cast<int>(rng() % 4));
    const MoeProblem pr = problem_with(E_local, P1, P2);
    const std::vector<int> O = first_rows_from_counts(random_expert_rows(rng, E_local, pr.b_m, 4), pr.b_m);
    const int Gs = std::vector<int>{1, 3, 66}[rng() % 3];
    const std::string what = "trial " + std::to_string(trial) + " P1=" + std::to_string(P1) + " P2=" + std::to_string(P2) +
                             " Gs=" + std::to_string(Gs) + " rows=" + std::to_string(O.back());
    expect_pairs_cover_every_tile(make_interleaved_schedule(pr, O.data(), 2, Gs), "interleaved " + what);
    expect_pairs_cover_every_tile(make_expert_wave_schedule(pr, O.data(), 1 + trial % E_local, Gs, trial % 2), "wave " + what);
  }
  const MoeProblem odd = problem_with(2, 4, 3);  // P2 = 3: no pairs
  const std::vector<int> O{0, 1, 2};
  EXPECT_FALSE(ClusterTiling{2}.divides(make_interleaved_schedule(odd, O.data(), 1, 1).streams));
  EXPECT_TRUE(ClusterTiling{1}.divides(make_interleaved_schedule(odd, O.data(), 1, 1).streams));
}

// Mixed pairs (MixedPairTiling): scheduler rows of 256, each expert's rows_e split into M-rows (both halves,
// sharing B) and at most one last N-row (first half only, sharing A, half the pair tiles empty). Every CTA tile
// that holds rows — (stage, 128-row block, n-block) — exactly once over all clusters and both CTAs, none for a
// half without rows, and both CTAs of a cluster on the same row and stage, skipping the same empty tiles.
TEST(MoeScheduler, MixedPairsCoverEveryHalfRowTileOnceInLockstep) {
  std::mt19937_64 rng(20261201);
  for (int trial = 0; trial < 60; ++trial) {
    const int E_local = 1 + static_cast<int>(rng() % 9);
    const int P1 = 2 * (1 + static_cast<int>(rng() % 4)), P2 = 2 * (1 + static_cast<int>(rng() % 4));
    MoeProblem pr = problem_with(E_local, P1, P2);
    pr.b_m = 2 * MixedPairTiling::kHalfRows;
    std::vector<int> rows(E_local);
    for (int& r : rows) r = std::vector<int>{0, 1, 128, 129, 256, 300, 600}[rng() % 7];
    const std::vector<int> O = first_rows_from_counts(rows, pr.b_m);
    const int Gs = std::vector<int>{1, 3, 66}[rng() % 3];
    const std::string what = "trial " + std::to_string(trial) + " P1=" + std::to_string(P1) + " P2=" + std::to_string(P2) +
                             " Gs=" + std::to_string(Gs) + " rows=" + std::to_string(O.back());
    auto check = [&](const auto& s, const std::string& name) {
      std::map<std::tuple<int, int, int>, int> seen;  // (stage, 128-row block, n-block)
      std::map<std::pair<int, int>, std::pair<int, int>> per_row;  // (stage, row) -> (CTA tiles, counter target)
      for (int g = 0; g < s.Gs; ++g)
        for (const Tile& pt : instance_sequence(s, g)) {
          const int P = pt.stage == Stage::L1 ? P1 : P2;
          const bool m_row = MixedPairTiling::m_row(rows[pt.expert], pt.m_block);
          Tile c0, c1;
          int h0 = -1, h1 = -1;
          const bool v0 = MixedPairTiling::cta_tile(pt, 0, m_row, P, c0, h0), v1 = MixedPairTiling::cta_tile(pt, 1, m_row, P, c1, h1);
          ASSERT_EQ(v0, v1) << name << what;
          if (!v0) continue;
          EXPECT_EQ(c0.row, c1.row) << name << what;
          auto& [tiles, target] = per_row[{static_cast<int>(pt.stage), pt.row}];
          tiles += 2;
          target = MixedPairTiling::cta_tiles_per_row(m_row, P);
          for (auto [c, h] : {std::pair{c0, h0}, std::pair{c1, h1}}) {
            EXPECT_LT(c.n_block, P) << name << what;
            ++seen[{static_cast<int>(c.stage), 2 * c.row + h, c.n_block}];
          }
        }
      for (const auto& [key, n] : per_row)
        EXPECT_EQ(n.first, n.second) << name << what << " row " << key.second << ": the counter target is not the row's CTA tile count";
      int half_rows = 0;  // 128-row blocks holding rows
      for (int e = 0; e < E_local; ++e) half_rows += (rows[e] + MixedPairTiling::kHalfRows - 1) / MixedPairTiling::kHalfRows;
      EXPECT_EQ(static_cast<int>(seen.size()), half_rows * (P1 + P2)) << name << what;
      for (const auto& [key, n] : seen) {
        EXPECT_EQ(n, 1) << name << what;
        const int block = std::get<1>(key), p = block / 2;
        int e = 0;
        while (O[e + 1] <= p) ++e;
        EXPECT_LT(MixedPairTiling::kHalfRows * (2 * (p - O[e]) + block % 2), rows[e]) << name << what << ": a half without rows";
      }
    };
    check(make_interleaved_schedule(pr, O.data(), 2, Gs), "interleaved ");
    check(make_expert_wave_schedule(pr, O.data(), 1 + trial % E_local, Gs, trial % 2), "wave ");
  }
  EXPECT_TRUE(MixedPairTiling::m_row(129, 0));
  EXPECT_FALSE(MixedPairTiling::m_row(128, 0));
  EXPECT_TRUE(MixedPairTiling::m_row(300, 0));
  EXPECT_FALSE(MixedPairTiling::m_row(300, 1));  // 44 rows in its first half
  EXPECT_EQ(MixedPairTiling::cta_tiles_per_row(true, 8), 16);
  EXPECT_EQ(MixedPairTiling::cta_tiles_per_row(false, 8), 8);
}

// The kernel's own per-CTA walk and wait targets (TileWalk, as the producer runs them), every CTA of a launch
// in lockstep with its cluster: single CTAs (also on a ring smaller than the rows), N-pairs and mixed M-pairs,
// both schedules, random routings and grid sizes. No start may break a dependency counted from the true CTA
// tiles of each row, every tile runs once, and nothing deadlocks. (With the CTA-pair L1 target of afda86a,
// the pair streams' P1 instead of the row's CTA tiles, this test fails: checked by putting it back.)
TEST(MoeScheduler, KernelWalkKeepsEveryDependencyCtaByCta) {
  std::mt19937_64 rng(20261202);
  for (int trial = 0; trial < 90; ++trial) {
    const int E_local = 1 + static_cast<int>(rng() % 6);
    const int P1 = 2 * (1 + static_cast<int>(rng() % 4)), P2 = 2 * (1 + static_cast<int>(rng() % 3));
    const int kind = trial % 3;  // 0: single CTAs, 1: N-pairs, 2: mixed M-pairs
    CtaLaunch l;
    l.problem = problem_with(E_local, P1, P2);
    if (kind == 2) l.problem.b_m = 2 * MixedPairTiling::kHalfRows;
    l.expert_rows = random_expert_rows(rng, E_local, l.problem.b_m, 3);
    l.cluster_n = kind == 1 ? 2 : 1;
    l.cluster_m = kind == 2 ? 2 : 1;
    l.ctas = 2 * std::vector<int>{1, 2, 5, 33}[rng() % 4];
    l.D_rows = 1 + static_cast<int>(rng() % 3);
    l.wave_experts = 1 + static_cast<int>(rng() % E_local);
    l.wave_lag = static_cast<int>(rng() % 2);
    const std::vector<int> O = first_rows_from_counts(l.expert_rows, l.problem.b_m);
    const int rows = O.back();
    for (int ring : {0, 1}) {
      if (ring == 1 && kind != 0) continue;  // pairs run on the plain ring (FusedMoeLayer)
      SimulationConfig cfg;
      cfg.l1_time = 1 + static_cast<int>(rng() % 3);
      cfg.l2_time = 1 + static_cast<int>(rng() % 2);
      const std::string what = "trial " + std::to_string(trial) + " kind " + std::to_string(kind) + " P1=" + std::to_string(P1) +
                               " P2=" + std::to_string(P2) + " ctas=" + std::to_string(l.ctas) + " rows=" + std::to_string(rows);
      for (int which = 0; which < 2; ++which) {
        CtaLaunch run = l;
        if (ring == 1) {  // the smallest ring each schedule is deadlock-free with (required_ring_slots)
          const int instances = l.ctas;
          run.ring_slots = which == 0 ? required_ring_slots(make_interleaved_schedule(l.problem, O.data(), l.D_rows, instances))
                                      : required_ring_slots(make_expert_wave_schedule(l.problem, O.data(), l.wave_experts, instances, l.wave_lag));
        }
        const CtaSimulationResult r = which == 0 ? simulate_ctas<InterleavedSchedule>(run, cfg) : simulate_ctas<ExpertWaveSchedule>(run, cfg);
        const std::string name = std::string(which == 0 ? "interleaved " : "wave ") + what + " ring " + std::to_string(run.ring_slots);
        EXPECT_TRUE(r.finished) << name << ": " << r.deadlock;
        EXPECT_EQ(r.violation, "") << name;
        EXPECT_EQ(r.cta_tiles_run, r.cta_tiles_expected) << name;
        long half_rows = 0;  // CTA tiles hold 128 rows: whole rows, or with M-pairs the halves that hold tokens
        for (int e = 0; e < E_local; ++e) half_rows += (l.expert_rows[e] + 127) / 128;
        const long want = kind == 2 ? half_rows * (P1 + P2) : static_cast<long>(rows) * (P1 + P2);
        EXPECT_EQ(r.cta_tiles_expected, want) << name;
      }
    }
  }
}

TEST(MoeScheduler, AllExpertsEmptyGivesNoTiles) {
  const MoeProblem pr = problem_with(4, 2, 2);
  const std::vector<int> O(5, 0);
  EXPECT_TRUE(instance_sequence(make_interleaved_schedule(pr, O.data(), 1, 3), 0).empty());
  EXPECT_TRUE(instance_sequence(make_expert_wave_schedule(pr, O.data(), 2, 3), 0).empty());
}

TEST(MoeScheduler, InterleavedFollowsAlgorithm1Literally) {
  // Rows 0..2 (one expert of 3 m-blocks), P1 = 2, P2 = 1, D = 1, one instance:
  // k1=0 (p1=0), k2=0 (p2=0): 0+1 <= 0? no  -> L1(0,0)
  // k1=1 (p1=0):               no           -> L1(0,1)
  // k1=2 (p1=1):               0+1 <= 1     -> L2(0,0)
  // k2=1 (p2=1):               1+1 <= 1? no -> L1(1,0), L1(1,1), then p1=2: L2(1,0); then L1(2,0), L1(2,1),
  // then L1 done (p1 = inf): L2(2,0).
  const MoeProblem pr = problem_with(1, 2, 1);
  const std::vector<int> O{0, 3};
  EXPECT_EQ(format_sequence(instance_sequence(make_interleaved_schedule(pr, O.data(), 1, 1), 0)),
            "L1(0,0) L1(0,1) L2(0,0) L1(1,0) L1(1,1) L2(1,0) L1(2,0) L1(2,1) L2(2,0)");
  // Wave, one expert per wave, two instances: global order, L1 n-major inside the wave:
  // L1(0,0) L1(1,0) L1(2,0) L1(0,1) L1(1,1) L1(2,1) L2(0,0) L2(1,0) L2(2,0).
  const ExpertWaveSchedule w = make_expert_wave_schedule(pr, O.data(), 1, 2);
  EXPECT_EQ(format_sequence(instance_sequence(w, 0)), "L1(0,0) L1(2,0) L1(1,1) L2(0,0) L2(2,0)");
  EXPECT_EQ(format_sequence(instance_sequence(w, 1)), "L1(1,0) L1(0,1) L1(2,1) L2(1,0)");
}

// Pipelined waves (λ = 1), one expert per wave, one instance: wave 0's L1 tiles, then wave 1's L1 tiles
// before wave 0's L2 tiles, and so on; the last segment holds only the last wave's L2 tiles. An empty
// expert (wave 1 here) is an empty wave: its segment holds only wave 0's L2 tiles.
TEST(MoeScheduler, PipelinedWavesRunNextWavesL1BeforeThisWavesL2) {
  const MoeProblem pr = problem_with(3, 2, 1);  // P1 = 2, P2 = 1
  const std::vector<int> O{0, 1, 3, 4};        // experts: 1, 2, 1 rows
  EXPECT_EQ(format_sequence(instance_sequence(make_expert_wave_schedule(pr, O.data(), 1, 1, 1), 0)),
            "L1(0,0) L1(0,1) L1(1,0) L1(2,0) L1(1,1) L1(2,1) L2(0,0) L1(3,0) L1(3,1) L2(1,0) L2(2,0) L2(3,0)");
  const std::vector<int> O_empty{0, 1, 1, 2};  // expert 1 has no rows
  EXPECT_EQ(format_sequence(instance_sequence(make_expert_wave_schedule(pr, O_empty.data(), 1, 1, 1), 0)),
            "L1(0,0) L1(0,1) L2(0,0) L1(1,0) L1(1,1) L2(1,0)");
  // λ = 0 is the baseline order.
  EXPECT_EQ(format_sequence(instance_sequence(make_expert_wave_schedule(pr, O.data(), 1, 1, 0), 0)),
            "L1(0,0) L1(0,1) L2(0,0) L1(1,0) L1(2,0) L1(1,1) L1(2,1) L2(1,0) L2(2,0) L1(3,0) L1(3,1) L2(3,0)");
  EXPECT_THROW(make_expert_wave_schedule(pr, O.data(), 1, 1, -1), InputError);
}

TEST(MoeScheduler, SimulationKeepsDependenciesAndNeverDeadlocks) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 120; ++trial) {
    const int E_local = 1 + static_cast<int>(rng() % 8);
    const int P1 = 1 + static_cast<int>(rng() % 5), P2 = 1 + static_cast<int>(rng() % 5);
    const MoeProblem pr = problem_with(E_local, P1, P2);
    const std::vector<int> O = first_rows_from_counts(random_expert_rows(rng, E_local, pr.b_m, 5), pr.b_m);
    const int Gs = std::vector<int>{1, 2, 5, 8, 33}[rng() % 5];
    const int D = 1 + static_cast<int>(rng() % 5);
    const int W = 1 + static_cast<int>(rng() % E_local);
    SimulationConfig cfg;
    cfg.l1_time = 1 + static_cast<int>(rng() % 4);
    cfg.l2_time = 1 + static_cast<int>(rng() % 4);
    const std::string what = "trial " + std::to_string(trial);
    const InterleavedSchedule si = make_interleaved_schedule(pr, O.data(), D, Gs);
    // Plain buffer, then the smallest ring each schedule is proven to need.
    for (bool ring : {false, true}) {
      cfg.ring_slots = ring ? required_ring_slots(si) : 0;
      const SimulationResult ri = simulate(si, cfg);
      ASSERT_TRUE(ri.finished) << what << " interleaved deadlocked: " << ri.deadlock;
      EXPECT_TRUE(ri.dependencies_held) << what;
      EXPECT_EQ(ri.tiles_run, O.back() * (P1 + P2)) << what;
      expect_dependencies(ri, si.streams, cfg.ring_slots > 0 ? cfg.ring_slots : std::max(1, O.back()), "interleaved " + what);
      for (int lag : {0, 1, 2}) {
        const ExpertWaveSchedule swl = make_expert_wave_schedule(pr, O.data(), W, Gs, lag);
        cfg.ring_slots = ring ? required_ring_slots(swl) : 0;
        const SimulationResult rw = simulate(swl, cfg);
        const std::string wwhat = "wave lag " + std::to_string(lag) + " " + what;
        ASSERT_TRUE(rw.finished) << wwhat << " deadlocked: " << rw.deadlock;
        EXPECT_TRUE(rw.dependencies_held) << wwhat;
        EXPECT_EQ(rw.tiles_run, O.back() * (P1 + P2)) << wwhat;
        expect_dependencies(rw, swl.streams, cfg.ring_slots > 0 ? cfg.ring_slots : std::max(1, O.back()), wwhat);
      }
    }
  }
}

TEST(MoeScheduler, SimulationDetectsDeadlocks) {
  const MoeProblem pr = problem_with(1, 2, 2);
  const std::vector<int> O{0, 2};
  // D = 0: the only instance emits L2(0,0) before its own L1(0,1) and waits on itself.
  InterleavedSchedule bad{make_streams(pr, O.data()), 0, 1};
  const SimulationResult r = simulate(bad, SimulationConfig{});
  EXPECT_FALSE(r.finished);
  EXPECT_NE(r.deadlock.find("L2(row 0"), std::string::npos) << r.deadlock;
  EXPECT_THROW(make_interleaved_schedule(pr, O.data(), 0, 1), InputError);
  // A ring smaller than a wave: L1(1, ·) needs slot 0, whose L2 tiles come after it in the wave.
  SimulationConfig small;
  small.ring_slots = 1;
  EXPECT_FALSE(simulate(make_expert_wave_schedule(pr, O.data(), 1, 1), small).finished);
}

TEST(MoeScheduler, InterleavingPutsL1TilesBetweenL2Tiles) {
  // DeepSeek-like tile mix scaled down: P1 = 4, P2 = 4 and P1 = 4, P2 = 7; 16 experts, 4-6 m-blocks each.
  for (auto [P1, P2] : {std::pair{4, 4}, std::pair{4, 7}, std::pair{6, 3}}) {
    std::mt19937_64 rng(P1 * 100 + P2);
    const MoeProblem pr = problem_with(16, P1, P2);
    std::vector<int> rows(16);
    for (int& r : rows) r = pr.b_m * 4 + static_cast<int>(rng() % (2 * pr.b_m));
    const std::vector<int> O = first_rows_from_counts(rows, pr.b_m);
    const int Gs = 16;
    const int D = static_cast<int>(D_knee_rows(pr, Gs));
    std::vector<std::vector<Tile>> wi, ww;
    const InterleavedSchedule si = make_interleaved_schedule(pr, O.data(), D, Gs);
    const ExpertWaveSchedule sw = make_expert_wave_schedule(pr, O.data(), wave_size_experts(pr, Gs), Gs);
    for (int g = 0; g < Gs; ++g) wi.push_back(instance_sequence(si, g)), ww.push_back(instance_sequence(sw, g));
    const L2GapStats gi = l2_gap_stats(wi), gw = l2_gap_stats(ww);
    std::printf("P1=%d P2=%d: wave mean %.2f L1/L2 gap, back-to-back %.2f; interleaved mean %.2f, back-to-back %.2f\n",
                P1, P2, gw.mean_l1_between, gw.back_to_back_fraction, gi.mean_l1_between, gi.back_to_back_fraction);
    // Interleaving puts the tile mix n1/n2 = P1/P2 L1 tiles between consecutive L2 tiles (paper Eq. 12) ...
    EXPECT_NEAR(gi.mean_l1_between, static_cast<double>(P1) / P2, 0.1 * P1 / P2);
    EXPECT_GE(gi.mean_l1_between, gw.mean_l1_between);
    // ... where the wave schedule runs most L2 tiles back to back (the aligned burst after burst).
    EXPECT_GT(gw.back_to_back_fraction, 0.5);
    const double steady = P1 >= P2 ? 0.0 : 1.0 - static_cast<double>(P1) / P2;  // unavoidable when L2 outnumbers L1
    EXPECT_LT(gi.back_to_back_fraction, steady + 0.15);
    EXPECT_LT(gi.back_to_back_fraction, gw.back_to_back_fraction - 0.2);
  }
}

// Condition 2 of §4.2: with D below D_knee the L2 stream catches up with L1 tiles other instances have not
// finished and waits; from D_knee on it (almost) never does, and the makespan stops improving.
struct LeadSweep {
  std::vector<long> stall, makespan;  // index D - 1
  long knee = 0, total_l2 = 0;
};

LeadSweep sweep_lead(int P1, int P2, int Gs, int l1_time, int l2_time, int E_local, int blocks_per_expert) {
  const MoeProblem pr = problem_with(E_local, P1, P2);
  const std::vector<int> O = first_rows_from_counts(std::vector<int>(E_local, blocks_per_expert * pr.b_m), pr.b_m);
  LeadSweep sw;
  sw.knee = D_knee_rows(pr, Gs);
  EXPECT_EQ(sw.knee, model::anti_starvation_lead_rows(pr.b_n, Gs, pr.h_inter));  // the model's, not a copy
  sw.total_l2 = static_cast<long>(O.back()) * P2;
  SimulationConfig cfg;
  cfg.l1_time = l1_time;
  cfg.l2_time = l2_time;
  for (int D = 1; D <= 2 * sw.knee; ++D) {
    const SimulationResult r = simulate(make_interleaved_schedule(pr, O.data(), D, Gs), cfg);
    EXPECT_TRUE(r.finished) << r.deadlock;
    sw.stall.push_back(r.l2_stall_time);
    sw.makespan.push_back(r.makespan);
  }
  std::printf("P1=%d P2=%d Gs=%d D_knee=%ld  D: L2 stall / makespan:", P1, P2, Gs, sw.knee);
  for (std::size_t i = 0; i < sw.stall.size(); ++i) std::printf(" %zu:%ld/%ld", i + 1, sw.stall[i], sw.makespan[i]);
  std::printf("\n");
  return sw;
}

TEST(MoeScheduler, LeadBelowDKneeStallsL2AndAtDKneeItDoesNot) {
  // h = 896, h_inter = 256, tile 128x128: P1 = 4, P2 = 7, T_L1 : T_L2 = h : h_inter = 7 : 2; 32 CTAs -> D_knee = 8.
  const LeadSweep s = sweep_lead(4, 7, 32, 7, 2, 16, 8);
  ASSERT_EQ(s.knee, 8);
  EXPECT_GT(s.stall[0], s.total_l2) << "D = 1: L2 tiles should wait on other instances' L1 tiles";
  for (long D = 1; D < s.knee - 1; ++D) EXPECT_GT(s.stall[D - 1], s.stall[D]) << "stall should fall with D below D_knee, D = " << D;
  EXPECT_LE(s.stall[s.knee - 1], s.total_l2 / 50) << "at D_knee the L2 stream should (almost) never wait";
  const long best = *std::min_element(s.makespan.begin(), s.makespan.end());
  EXPECT_GT(s.makespan[0], best * 3 / 2);
  EXPECT_LE(s.makespan[s.knee - 1], best + best / 100);
}

TEST(MoeScheduler, LeadSweepAtTheDeepSeekTileMix) {
  // DeepSeek-V3 per-row mix on 132 CTAs: P1 = 32, P2 = 56, T_L1 : T_L2 = 7 : 2, D_knee = 5.
  const LeadSweep s = sweep_lead(32, 56, 132, 7, 2, 16, 8);
  ASSERT_EQ(s.knee, 5);
  EXPECT_LT(s.stall[s.knee - 1] * 100, s.stall[0]);
  const long best = *std::min_element(s.makespan.begin(), s.makespan.end());
  EXPECT_LE(s.makespan[s.knee - 1], best + best / 100);
  EXPECT_GT(s.makespan[0], best * 2);
}

TEST(MoeScheduler, WaveSizeHeuristic) {
  const auto problem = [](int E, int k, int h, int I, int T, int b_n) {
    MoeProblem pr = test::small_problem(2, E, k, T);
    pr.h_hidden = h, pr.h_inter = I, pr.b_n = b_n;
    return pr;
  };
  // Rule 1, one round >= 90% full: the headline, 2 m-blocks · P1 = 16 -> 32 tiles per expert -> 4 (128/132).
  EXPECT_EQ(wave_size_experts(problem(256, 8, 7168, 2048, 4096, 256), 132), 4);
  // ... 7168-2048 at 2048 tokens: 16 tiles per expert -> 8 (128/132); at 8192: 64 -> 2 (128/132).
  EXPECT_EQ(wave_size_experts(problem(256, 8, 7168, 2048, 2048, 256), 132), 8);
  EXPECT_EQ(wave_size_experts(problem(256, 8, 7168, 2048, 8192, 256), 132), 2);
  // Rule 2: one expert is 96 L1 tiles (73% of a round) -> the fewest experts filling the smaller phase:
  // 4 m-blocks · min(P1 = 24, P2 = 16) = 64 tiles -> 3 experts.
  EXPECT_EQ(wave_size_experts(problem(64, 8, 4096, 3072, 2048, 256), 132), 3);
  // Rule 2: one expert is more than a round (DiT-like, 16 m-blocks · 72) -> 1 by the smaller phase
  // (16 · min(72, 9) = 144 >= 132).
  EXPECT_EQ(wave_size_experts(problem(8, 2, 1152, 4608, 8192, 128), 132), 1);
  // Clamped to the local experts.
  EXPECT_EQ(wave_size_experts(problem(256, 8, 7168, 2048, 1, 256), 100000), 128);
  // Whatever it picks: rule 1 fills at least 90% of one round, rule 2 fills the smaller phase.
  for (int T : {1, 64, 300, 2048, 4096, 8192})
    for (int K : {17, 66, 132}) {
      const MoeProblem pr = problem(64, 8, 4096, 1536, T, 256);
      const int W = wave_size_experts(pr, K);
      const std::int64_t m = ceil_div(ceil_div(static_cast<std::int64_t>(T) * pr.top_k, pr.E_local()), pr.b_m);
      const std::int64_t l1 = m * pr.P1_l1_n_blocks();
      const bool rule1 = W * l1 <= K && 10 * W * l1 >= 9 * K;
      const bool rule2 = W == pr.E_local() || W * m * std::min(pr.P1_l1_n_blocks(), pr.P2_l2_n_blocks()) >= K;
      EXPECT_TRUE(W >= 1 && W <= pr.E_local());
      EXPECT_TRUE(rule1 || rule2) << "T=" << T << " K=" << K << " W=" << W;
    }
}

TEST(MoeScheduler, ValidatedConstructorsRejectBadArguments) {
  const MoeProblem pr = problem_with(4, 2, 2);
  const std::vector<int> O{0, 1, 2, 3, 4};
  EXPECT_THROW(make_interleaved_schedule(pr, O.data(), 1, 0), InputError);
  EXPECT_THROW(make_expert_wave_schedule(pr, O.data(), 0, 4), InputError);
  EXPECT_THROW(make_expert_wave_schedule(pr, O.data(), 5, 4), InputError);
  EXPECT_THROW(make_interleaved_schedule(pr, nullptr, 1, 4), InputError);
}

TEST(MoeScheduler, AllOwnersOfRoutedProblemsForP1To8) {
  for (int P : {1, 2, 4, 8}) {
    MoeProblem pr = test::small_problem(P, 4 * P, 3, 200);
    const Routing r = build_routing(pr, skewed_routing(pr, 1.2, 11 + P));
    for (int owner = 0; owner < P; ++owner) {
      const int* O = r.owner_first_row(owner);
      const std::vector<int> Ov(O, O + pr.E_local() + 1);
      const std::string what = "P=" + std::to_string(P) + " owner " + std::to_string(owner);
      const InterleavedSchedule si = make_interleaved_schedule(pr, O, 2, 5);
      const ExpertWaveSchedule sw = make_expert_wave_schedule(pr, O, 2, 5);
      expect_exactly_once(si, Ov, what);
      expect_exactly_once(sw, Ov, what);
      SimulationConfig cfg;
      cfg.ring_slots = required_ring_slots(si);
      EXPECT_TRUE(simulate(si, cfg).finished) << what;
      cfg.ring_slots = required_ring_slots(sw);
      EXPECT_TRUE(simulate(sw, cfg).finished) << what;
    }
  }
}

// Wave L1 order inside an expert: groups of kL1RowGroup rows, n-major inside a group, groups in order;
// one instance (Gs = 1) shows the global order directly.
TEST(MoeScheduler, WaveRunsL1InRowGroupsNMajor) {
  const MoeProblem pr = problem_with(2, 3, 1);  // P1 = 3, P2 = 1
  const std::vector<int> O{0, 20, 21};           // expert 0: 20 rows (groups of 16 and 4), expert 1: 1 row
  const auto seq = instance_sequence(make_expert_wave_schedule(pr, O.data(), 2, 1), 0);
  ASSERT_EQ(seq.size(), 21u * 4);
  const int G = ExpertWaveSchedule::kL1RowGroup;
  for (int i = 0; i < 3 * G; ++i) {  // group 0: rows 0..15, n = 0, 0, ..., 1, ...
    EXPECT_EQ(seq[i].row, i % G);
    EXPECT_EQ(seq[i].n_block, i / G);
  }
  for (int i = 0; i < 3 * 4; ++i) {  // group 1: rows 16..19
    EXPECT_EQ(seq[3 * G + i].row, G + i % 4);
    EXPECT_EQ(seq[3 * G + i].n_block, i / 4);
  }
  EXPECT_EQ(format_sequence({seq[60], seq[61], seq[62], seq[63]}), "L1(20,0) L1(20,1) L1(20,2) L2(0,0)");
}

// The default lead covers both cursor spans: at interleave_lead_rows the lockstep simulation's L2 stalls
// are a small fraction of the makespan for the grid's shapes, and for few, wide experts (P1 >> P2) the
// paper's D_knee alone is far from it.
TEST(MoeScheduler, DefaultLeadRemovesStallsWhereDkneeAloneDoesNot) {
  struct Shape { const char* name; int h, I, E_local, m_blocks_per_expert; };
  const Shape shapes[] = {{"dit", 1152, 4608, 4, 32}, {"mixtral", 4096, 14336, 4, 32},
                          {"deepseek", 7168, 2048, 128, 2}, {"qwen3-30b", 2048, 768, 64, 4}};
  for (const Shape& sh : shapes) {
    MoeProblem pr;
    pr.P_ranks = 2, pr.E_experts = 2 * sh.E_local, pr.top_k = 2, pr.h_hidden = sh.h, pr.h_inter = sh.I, pr.T_tokens = 8192;
    std::vector<int> O(sh.E_local + 1);
    for (int e = 0; e <= sh.E_local; ++e) O[e] = e * sh.m_blocks_per_expert;
    SimulationConfig cfg;
    cfg.l1_time = sh.h / 128, cfg.l2_time = sh.I / 128;
    const int D = static_cast<int>(interleave_lead_rows(pr, 132));
    EXPECT_GE(D, D_knee_rows(pr, 132)) << sh.name;
    const SimulationResult at_lead = simulate(make_interleaved_schedule(pr, O.data(), D, 132), cfg);
    const SimulationResult far = simulate(make_interleaved_schedule(pr, O.data(), 4 * D, 132), cfg);
    ASSERT_TRUE(at_lead.finished && far.finished) << sh.name;
    EXPECT_LE(at_lead.l2_stall_time / 132, at_lead.makespan / 50) << sh.name << " D=" << D;
    EXPECT_LE(at_lead.makespan, far.makespan * 102 / 100) << sh.name << " D=" << D;
  }
  MoeProblem dit;
  dit.P_ranks = 2, dit.E_experts = 8, dit.top_k = 2, dit.h_hidden = 1152, dit.h_inter = 4608, dit.T_tokens = 8192;
  std::vector<int> O{0, 32, 64, 96, 128};
  SimulationConfig cfg;
  cfg.l1_time = 9, cfg.l2_time = 36;
  const long knee = simulate(make_interleaved_schedule(dit, O.data(), static_cast<int>(D_knee_rows(dit, 132)), 132), cfg).makespan;
  const long lead = simulate(make_interleaved_schedule(dit, O.data(), static_cast<int>(interleave_lead_rows(dit, 132)), 132), cfg).makespan;
  std::printf("DiT-like P1 = 72, P2 = 9, 132 CTAs: makespan %ld at D_knee = 2, %ld at the default lead D = 15\n", knee, lead);
  EXPECT_EQ(D_knee_rows(dit, 132), 2);
  EXPECT_EQ(interleave_lead_rows(dit, 132), 15);
  EXPECT_GT(knee, 2 * lead);
}

}  // namespace
}  // namespace xstage::moe
