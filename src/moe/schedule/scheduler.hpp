// The two tile streams of one rank and the two schedules that merge them (paper §4.2).
//
// Scheduler rows: p = one (local expert, m-block) pair, numbered expert by expert (O_e = the expert's first
// row, from expert_first_rows in routing.hpp); experts with no tokens have no rows. Row p is dispatch rows
// [p·b_m, (p+1)·b_m) and ring slot p mod S.
//   L1 stream: tile k1 = (row p1 = k1 / P1, n-block k1 mod P1) over the 2·h_inter outputs (P1 per row).
//   L2 stream: tile k2 = (row p2 = k2 / P2, n-block k2 mod P2) over the h outputs (P2 per row).
// Dependency: L2 (p, *) reads the whole h_inter of row p, so it needs every L1 (p, *) done — the kernel's
// per-slot l1_done counter (layout.hpp) reaching P1·(generation + 1). Both schedules only reorder tiles;
// the counters keep every dependency.
//
// One persistent instance runs one tile at a time. The paper pairs two CTAs per tile
// (n = 2·(k mod P_i) + r) for Blackwell's 2-CTA MMA. Hopper has no 2-SM MMA, but a thread-block cluster of
// two CTAs can share each A k-block by TMA multicast: with ClusterTiling (below) an instance is a cluster,
// the schedule runs on pair tiles of 2·b_n columns, and CTA r of the cluster owns n-block 2·n' + r. Without
// clusters (c = 1) an instance is one CTA owning a whole b_m × b_n tile; Gs is the number of instances.
//
// Both schedules are stateless objects: `start(g)` gives instance g's first state, `next(state)` the
// tile to run and the state after it (Stage::none when the instance is done). The producer warp, the
// consumer warpgroups and the storer warps of one CTA each walk the same sequence independently.
#pragma once

#include <cstdint>

#include "moe/problem/problem.hpp"

namespace xstage::moe {

enum class Stage : std::uint8_t { none, L1, L2 };

struct Tile {
  Stage stage = Stage::none;
  int row = -1;          // scheduler row p
  int expert = -1;       // local expert of the row
  int m_block = -1;      // m-block inside the expert: p - O_e
  int n_block = -1;      // N-block inside the row: [0, P1) for L1, [0, P2) for L2
  XSTAGE_HD constexpr bool valid() const { return stage != Stage::none; }
};

// The scheduler rows of one owner: O_e for its E_local experts, E_local + 1 entries, non-decreasing.
struct SchedulerRows {
  const int* first_row = nullptr;
  int E_local = 0;

  XSTAGE_HD constexpr int num_rows() const { return first_row[E_local]; }
  // The expert whose rows contain p: the last e with O_e <= p (empty experts share O with the next one).
  XSTAGE_HD int expert_of_row(int p) const {
    int lo = 0, hi = E_local;  // invariant: O[lo] <= p < O[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (first_row[mid] <= p) lo = mid; else hi = mid;
    }
    return lo;
  }
};

struct TileStreams {
  SchedulerRows rows;
  int P1 = 0;  // L1 n-blocks per row (2·h_inter / b_n)
  int P2 = 0;  // L2 n-blocks per row (h / b_n)

  XSTAGE_HD constexpr int l1_tiles() const { return rows.num_rows() * P1; }
  XSTAGE_HD constexpr int l2_tiles() const { return rows.num_rows() * P2; }
  XSTAGE_HD Tile make(Stage stage, int p, int n) const {
    const int e = rows.expert_of_row(p);
    return Tile{stage, p, e, p - rows.first_row[e], n};
  }
  XSTAGE_HD Tile l1_tile(int k1) const { return make(Stage::L1, k1 / P1, k1 % P1); }
  XSTAGE_HD Tile l2_tile(int k2) const { return make(Stage::L2, k2 / P2, k2 % P2); }
};

// Clusters of c CTAs along N (the paper's CTA pairs, n = c·n' + r). The schedules run unchanged on the pair
// streams (P1/c and P2/c pair tiles per row, one instance per cluster), and CTA r of a cluster runs n-block
// c·n' + r of each pair tile n' its cluster gets: the c CTAs run the same rows with the same A k-blocks at
// the same time, which is what lets one TMA load feed all of them. Counters stay per CTA tile (l1_done
// still counts P1 tiles per row), so no dependency changes.
struct ClusterTiling {
  int c = 1;  // CTAs per cluster

  XSTAGE_HD constexpr bool divides(const TileStreams& s) const { return c >= 1 && s.P1 % c == 0 && s.P2 % c == 0; }
  XSTAGE_HD constexpr TileStreams pair_streams(TileStreams s) const {
    s.P1 /= c;
    s.P2 /= c;
    return s;
  }
  XSTAGE_HD constexpr Tile cta_tile(Tile t, int r) const {
    if (t.valid()) t.n_block = c * t.n_block + r;
    return t;
  }
  // CTA tiles that finish one stage of a scheduler row with `pair_tiles` pair tiles per row (the pair
  // streams' P1 or P2): what the row's l1_done / l2_done counters count up to.
  XSTAGE_HD constexpr int cta_tiles_per_row(int pair_tiles) const { return c * pair_tiles; }
};

// Mixed CTA pairs along M (--cluster-m 2): scheduler rows of 2·128 rows (MoeProblem::b_m = 256, every expert
// padded to a multiple of 256), the schedules unchanged on the plain streams (P1, P2 pair tiles per row, one
// instance per cluster). A row whose second 128-row half holds tokens is an *M-row*: CTA r runs half r of
// n-block n' and the pair shares the weight (B) k-blocks. A row with tokens in its first half only is an
// *N-row*: CTA r runs n-block 2·n' + r of the first half and the pair shares the activation (A) k-blocks, and
// pair tiles n' >= P/2 are empty (both CTAs skip them). So an expert's last, partly filled rows cost what N-pairs
// cost instead of a CTA computing padding. Needs even P1 and P2. l1_done / l2_done count CTA tiles: 2·P per
// M-row, P per N-row (`cta_tiles_per_row`).
struct MixedPairTiling {
  static constexpr int kHalfRows = 128;
  // Whether scheduler row m_block of an expert with rows_e rows (256-row blocks) is an M-row.
  XSTAGE_HD static constexpr bool m_row(int rows_e, int m_block) { return rows_e - 2 * kHalfRows * m_block > kHalfRows; }
  XSTAGE_HD static constexpr int cta_tiles_per_row(bool m_row, int P) { return m_row ? 2 * P : P; }
  // CTA r's tile of pair tile `pair` (a valid tile of the plain streams with P n-blocks in its stage):
  // sets `cta` (n_block) and `half` (0 or 1: which 128 rows of the scheduler row), false for an empty pair tile.
  XSTAGE_HD static constexpr bool cta_tile(const Tile& pair, int r, bool m_row, int P, Tile& cta, int& half) {
    cta = pair;
    if (m_row) {
      half = r;
      return true;
    }
    half = 0;
    if (2 * pair.n_block >= P) return false;
    cta.n_block = 2 * pair.n_block + r;
    return true;
  }
};

template <class State>
struct ScheduleStep {
  Tile tile;    // Stage::none: the instance has no more tiles
  State next;
};

// Algorithm 1, one CTA per tile. Emits L2 tile k2 only when the L1 stream leads it by at least D rows
// (p2 + D <= p1, p1 = +inf once L1 is done); otherwise the next L1 tile. D >= 1 is required: with D = 0 an
// instance could emit L2 (p, ·) before its own L1 (p, ·) tile and wait for itself forever.
struct InterleavedSchedule {
  struct State {
    int k1 = 0;
    int k2 = 0;
  };
  TileStreams streams;
  int D_rows = 1;  // minimum lead of L1 over L2, in scheduler rows (D_knee: schedule_host.hpp)
  int Gs = 1;      // persistent instances (grid size)

  XSTAGE_HD constexpr State start(int g) const { return State{g, g}; }
  XSTAGE_HD ScheduleStep<State> next(State s) const {
    const int n1 = streams.l1_tiles(), n2 = streams.l2_tiles();
    if (s.k1 >= n1 && s.k2 >= n2) return {Tile{}, s};
    const bool l1_done = s.k1 >= n1;
    const int p2 = s.k2 / streams.P2;
    if (s.k2 < n2 && (l1_done || p2 + D_rows <= s.k1 / streams.P1))
      return {streams.l2_tile(s.k2), State{s.k1, s.k2 + Gs}};
    return {streams.l1_tile(s.k1), State{s.k1 + Gs, s.k2}};
  }
};

// The baseline: local experts in waves of `wave_experts`; the global order is wave 0's L1 tiles, wave 0's
// L2 tiles, wave 1's L1 tiles, ...; instance g runs tiles g, g + Gs, g + 2·Gs, ... of that order.
// Inside a wave, an expert's L1 tiles go in groups of up to kL1RowGroup of its rows, n-block by n-block
// within a group (grouped rasterization): the tiles running at once share W1 n-blocks, so an expert's W1
// streams from memory once per group instead of once per m-block (Mixtral-like experts hold 235 MB of
// W1 and 32 m-blocks at 8192 tokens per rank). Groups never span experts (rows of different experts
// share no weights), and an expert's first group completes early, so the wave's first L2 tiles do not
// wait for its last L1 tile. L2 tiles stay row-major.
//
// `l2_lag_waves` = λ delays each wave's L2 tiles behind the next λ waves' L1 tiles: segment s of the
// global order is wave s's L1 tiles, then wave s - λ's L2 tiles (λ = 0: the baseline above). With λ = 1
// ("pipelined waves") an L2 tile's L1 rows finished a whole L1 round earlier, so its CTA does not wait
// for the wave's slowest L1 tile, at the price of two waves' weights in flight. Every L2 tile still comes
// after its own L1 tiles in the global order, so no instance can wait on itself or on a later tile.
struct ExpertWaveSchedule {
  static constexpr int kL1RowGroup = 16;
  struct State {
    int j = 0;
  };
  TileStreams streams;
  int wave_experts = 1;  // W (wave_size_experts below)
  int Gs = 1;
  int l2_lag_waves = 0;  // λ

  XSTAGE_HD constexpr int num_waves() const { return (streams.rows.E_local + wave_experts - 1) / wave_experts; }
  // Rows before wave w (0 for w <= 0; all rows from the last wave on).
  XSTAGE_HD constexpr int rows_before_wave(int w) const {
    if (w <= 0) return 0;
    const int e = w * wave_experts;
    return streams.rows.first_row[e < streams.rows.E_local ? e : streams.rows.E_local];
  }
  // First global index of segment s (s in [0, num_waves() + λ]; the last one is the end).
  XSTAGE_HD constexpr int segment_start(int s) const {
    return streams.P1 * rows_before_wave(s) + streams.P2 * rows_before_wave(s - l2_lag_waves);
  }

  XSTAGE_HD constexpr State start(int g) const { return State{g}; }
  XSTAGE_HD ScheduleStep<State> next(State s) const {
    const int segments = num_waves() + l2_lag_waves;
    if (s.j >= segment_start(segments)) return {Tile{}, s};
    // The segment holding j: the last one starting at or before j (empty segments start where the next does).
    int lo = 0, hi = segments;  // segment_start(lo) <= j < segment_start(hi)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (segment_start(mid) <= s.j) lo = mid; else hi = mid;
    }
    const int r0 = rows_before_wave(lo), wave_rows = rows_before_wave(lo + 1) - r0;
    int local = s.j - segment_start(lo);
    const State after{s.j + Gs};
    if (local < streams.P1 * wave_rows) {
      // The expert owning these indices (each expert's L1 tiles are P1·rows_e consecutive indices).
      const int el = streams.rows.expert_of_row(r0 + local / streams.P1);
      const int O = streams.rows.first_row[el], rows_e = streams.rows.first_row[el + 1] - O;
      const int idx = local - streams.P1 * (O - r0);
      const int G = rows_e < kL1RowGroup ? rows_e : kL1RowGroup;
      const int group = idx / (streams.P1 * G);
      const int rows_g = rows_e - group * G < G ? rows_e - group * G : G;
      const int in_group = idx - group * streams.P1 * G;
      return {streams.make(Stage::L1, O + group * G + in_group % rows_g, in_group / rows_g), after};
    }
    local -= streams.P1 * wave_rows;
    return {streams.make(Stage::L2, rows_before_wave(lo - l2_lag_waves) + local / streams.P2, local % streams.P2), after};
  }
};

// Wave-size heuristic, at the balanced load (T·k rows per owner spread over E_local experts), clamped to
// [1, E_local]:
//  1. if some number of experts puts a wave's L1 tiles into one round of the K_SM persistent CTAs at
//     least 90% full, take it: all the wave's L1 tiles start together, and its L2 tiles never wait behind
//     a second, partial L1 round (a straggler round cost up to one L1 mainloop per wave);
//  2. else the fewest experts that give every CTA at least one tile of the smaller phase (min(P1, P2) tiles
//     per row): fewer experts keep a wave's weights in L2 cache, fewer tiles than CTAs idle SMs.
// Measured on 2 × H200 (docs/MOE.md, "Tile streams and the two schedules"): rule 1 alone made the
// DeepSeek-V3-like headline 10% faster (5 -> 4 experts: 160 -> 128 L1 tiles) but 4096-3072-64-8 at 2048
// tokens 41% slower (3 -> 1 expert: 96 of 132 CTAs busy in L1, 64 in L2); the 90% floor keeps rule 1 to
// the cases where it helped.
XSTAGE_HD constexpr int wave_size_experts(const MoeProblem& pr, int K_SM) {
  const std::int64_t rows_per_expert = ceil_div(static_cast<std::int64_t>(pr.T_tokens) * pr.top_k, pr.E_local());
  const std::int64_t m_per_expert = ceil_div(rows_per_expert, pr.b_m);
  const std::int64_t l1_tiles = m_per_expert * pr.P1_l1_n_blocks();  // per expert
  const std::int64_t one_round = l1_tiles > 0 ? K_SM / l1_tiles : 0;
  std::int64_t W = 0;
  if (one_round >= 1 && 10 * one_round * l1_tiles >= 9LL * K_SM) {
    W = one_round;
  } else {
    const int n_min = pr.P1_l1_n_blocks() < pr.P2_l2_n_blocks() ? pr.P1_l1_n_blocks() : pr.P2_l2_n_blocks();
    const std::int64_t smaller_phase = m_per_expert * n_min;
    W = smaller_phase > 0 ? ceil_div(K_SM, smaller_phase) : pr.E_local();
  }
  return static_cast<int>(W < 1 ? 1 : (W > pr.E_local() ? pr.E_local() : W));
}

}  // namespace xstage::moe
