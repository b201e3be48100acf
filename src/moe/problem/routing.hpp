// Where every (token, k) pair goes: per-(source, expert) counts, each owner's scheduler rows, and the
// row of each pair in the owner's dispatch buffer.
//
// Order in an owner's dispatch buffer (deterministic, so every rank can compute any position alone):
// local expert, then source rank, then token, then k. Each expert's rows are contiguous and padded to
// b_m, so scheduler row p (one (expert, m-block) pair, Algorithm 1) is exactly dispatch rows
// [p·b_m, (p+1)·b_m). Within one expert the rows of one source are contiguous, so an L2 tile's rows go to
// at most P contiguous runs of source ranks (one combine counter update per run).
//
// The __host__ __device__ functions below are what the kernel uses (one warp computes the prefix sums
// from the counts all sources published); the host Routing builds the same numbers for tests, the
// reference and the kernel's metadata in host-driven tests.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/problem/problem.hpp"

namespace xstage::moe {

// ---- device-side index math ------------------------------------------------------------------------

// Counts are published as int32 [source rank][expert], one row per source (E entries).
XSTAGE_HD constexpr int count_index(int source, int expert, int E_experts) { return source * E_experts + expert; }

// Scheduler rows (m-blocks) an expert with `rows` dispatched rows occupies; 0 for an expert with no tokens.
XSTAGE_HD constexpr int m_blocks(int rows, int b_m) { return static_cast<int>(ceil_div(rows, b_m)); }

// O_e for the owner's local experts: first_row[e] = Σ_{e' < e} m_blocks(rows of e'), first_row[E_local] = all
// rows. `counts` is [P][E]; first_row has E_local + 1 entries.
XSTAGE_HD inline void expert_first_rows(const int* counts, const MoeProblem& pr, int owner, int* first_row) {
  int acc = 0;
  for (int e = 0; e < pr.E_local(); ++e) {
    first_row[e] = acc;
    int rows = 0;
    for (int s = 0; s < pr.P_ranks; ++s) rows += counts[count_index(s, pr.global_expert(owner, e), pr.E_experts)];
    acc += m_blocks(rows, pr.b_m);
  }
  first_row[pr.E_local()] = acc;
}

// Rows that sources before `source` sent to `expert`: the offset of `source`'s run inside the expert.
XSTAGE_HD inline int source_run_offset(const int* counts, const MoeProblem& pr, int expert, int source) {
  int acc = 0;
  for (int s = 0; s < source; ++s) acc += counts[count_index(s, expert, pr.E_experts)];
  return acc;
}

// The dispatch-buffer row of a pair: O_e·b_m + rows of earlier sources + `rank_in_source`, the pair's
// index among `source`'s pairs routed to `expert` (ordered by token; a token picks an expert at most once).
XSTAGE_HD inline std::int64_t dispatch_row(const int* counts, const int* first_row, const MoeProblem& pr,
                                           int expert, int source, int rank_in_source) {
  return static_cast<std::int64_t>(first_row[pr.local_expert(expert)]) * pr.b_m +
         source_run_offset(counts, pr, expert, source) + rank_in_source;
}

// Who a dispatch row came from; its combine row on `rank` is `pair` = token·top_k + k ([T][k][h]).
// Padding rows (an expert's last m-block past its count) have pair = -1 and are never stored.
struct RowSource {
  std::int32_t rank = -1;
  std::int32_t pair = -1;
  XSTAGE_HD constexpr bool valid() const { return pair >= 0; }
};

// ---- host side -------------------------------------------------------------------------------------

// One rank's router output: T_s <= T tokens, ids and weights [T_s][top_k].
struct RankTopK {
  int tokens = 0;
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

struct Routing {
  MoeProblem problem;
  std::vector<int> tokens;                          // [P] T_s, tokens each source sent this call
  std::vector<int> counts;                          // [P][E] pairs from source s to expert e
  std::vector<int> expert_rows;                     // [E] pairs of expert e, all sources together
  std::vector<int> first_row;                       // [P][E_local + 1] O_e on each owner (scheduler rows)
  std::vector<std::vector<std::int64_t>> pair_row;  // [source][t·k + j] row in the owner's dispatch buffer
  std::vector<std::vector<RowSource>> row_source;   // [owner][rows_used] provenance (padding: invalid)

  int count(int source, int expert) const { return counts[count_index(source, expert, problem.E_experts)]; }
  const int* owner_first_row(int owner) const { return first_row.data() + owner * (problem.E_local() + 1); }
  int scheduler_rows(int owner) const { return owner_first_row(owner)[problem.E_local()]; }
  std::int64_t rows_used(int owner) const { return static_cast<std::int64_t>(scheduler_rows(owner)) * problem.b_m; }
  // Dispatched rows of scheduler row p on `owner` that are real pairs (b_m except an expert's last block).
  int valid_rows(int owner, int p) const;
};

// Builds the routing for one call. Throws InputError for a wrong number of ranks, T_s > T, an id outside
// [0, E), or a token that names one expert twice.
Routing build_routing(const MoeProblem& problem, const std::vector<RankTopK>& topk);

// Seeded generators for tests and benchmarks (the same seed gives the same routing on every platform).
// Balanced: pairs fill experts round-robin through a seeded permutation, so every expert gets
// P·T·k/E pairs, ±1.
std::vector<RankTopK> balanced_routing(const MoeProblem& problem, std::uint64_t seed);
// Skewed: expert popularity ∝ 1/(i+1)^zipf_s over a seeded permutation of experts; every token draws
// top_k distinct experts by that popularity. zipf_s = 0 is uniform random; 1.0–1.5 gives hot experts.
std::vector<RankTopK> skewed_routing(const MoeProblem& problem, double zipf_s, std::uint64_t seed);

}  // namespace xstage::moe
