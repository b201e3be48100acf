// Host index math of the unfused expert-parallel layer (src/moe/unfused.cu): which token rows one rank
// sends to which owner, where they land, and how the combine brings every expert output back.
//
// The unfused layer moves tokens with NCCL all-to-all-v (grouped ncclSend/ncclRecv of exact sizes), the
// way EP layers run today (Megatron's all-to-all dispatcher: counts first, then variable-size exchange):
//   send buffer (source s): rows ordered by destination owner d, then d's local expert, then token, then k;
//   receive buffer (owner r): source-major, [s][local expert][token, k] as each source sent them;
//   expert-major buffer (owner r): local expert, then source, then token, then k — the dispatch order of
//   docs/MOE.md without the b_m padding, so each expert's rows are one contiguous GEMM operand;
//   combine: the owner gathers its expert outputs back into receive order and sends them back with the
//   transposed counts, so pair (t, j) of source s finds its expert output at the send-buffer row it left from.
// Everything follows from the all-gathered count matrix [P][E] and this rank's own top-k ids, so no
// other exchange is needed.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/problem/problem.hpp"

namespace xstage::moe {

struct AllToAllPlan {
  int rank = 0;
  // Dispatch: rows this rank sends to each owner and receives from each source (the combine swaps them).
  std::vector<std::int64_t> send_counts, send_displs;  // [P], rows
  std::vector<std::int64_t> recv_counts, recv_displs;  // [P], rows
  std::vector<std::int32_t> send_token;                // [rows_sent] token of each send-buffer row
  std::vector<std::int32_t> pair_send_row;             // [tokens·k] send-buffer row of pair (t, j)
  // This rank as an owner: its local experts' rows in the expert-major buffer.
  std::vector<std::int64_t> expert_rows;               // [E_local]
  std::vector<std::int64_t> expert_first_row;          // [E_local + 1]
  std::vector<std::int32_t> expert_row_to_recv_row;    // [rows_received] gather index: expert-major <- receive
  std::vector<std::int32_t> recv_row_to_expert_row;    // [rows_received] its inverse: receive <- expert-major

  std::int64_t rows_sent() const { return send_displs.empty() ? 0 : send_displs.back() + send_counts.back(); }
  std::int64_t rows_received() const { return recv_displs.empty() ? 0 : recv_displs.back() + recv_counts.back(); }
  // Rows that cross to another rank (dispatch sends + combine sends), the NVLink traffic of one call.
  std::int64_t rows_sent_to_peers() const;
};

// Builds rank `rank`'s plan from the count matrix `counts` ([P][E], count_index order: pairs from source s to
// expert e, all ranks' rows) and this rank's `tokens` × top_k expert ids. Throws InputError for an id outside
// [0, E), a token naming one expert twice, or a count row of this rank that does not match its ids (the
// exchanged counts and the ids disagree).
AllToAllPlan build_alltoall_plan(const MoeProblem& problem, int rank, const std::vector<int>& counts, int tokens,
                                 const std::int32_t* topk_ids);

// This rank's count row [E] from its ids (what the device histogram computes).
std::vector<int> count_row(const MoeProblem& problem, int tokens, const std::int32_t* topk_ids);

// Rows that an owner may ever receive: every token of every source routed here min(k, E_local) times.
std::int64_t max_rows_received(const MoeProblem& problem);

}  // namespace xstage::moe
