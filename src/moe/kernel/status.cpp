#include "moe/kernel/status.hpp"

namespace xstage::moe {
namespace {

const char* wait_name(MoeWait w) {
  switch (w) {
    case MoeWait::peer_send_ready: return "send_ready of peer rank";
    case MoeWait::dispatch_ready: return "dispatch_ready of scheduler row";
    case MoeWait::l1_done: return "l1_done of ring slot";
    case MoeWait::l2_done: return "l2_done of ring slot";
    case MoeWait::combine_arrived: return "combine_arrived (rows x n-blocks stored by the owners)";
    case MoeWait::peer_finished: return "peer_finished of peer rank";
    case MoeWait::pipeline_full: return "the TMA loads of pipeline stage";
    case MoeWait::pipeline_empty: return "the consumers to free pipeline stage";
    case MoeWait::staging_full: return "a Linear-2 tile in staging slot";
    case MoeWait::staging_empty: return "the storers to free staging slot";
    default: return "?";
  }
}

}  // namespace

std::string describe(const comm::DeviceStatus& st, double timeout_s) {
  const auto what = static_cast<MoeWait>(st.what);
  const std::string on_rank = " on rank " + std::to_string(st.rank);
  switch (what) {
    case MoeWait::capacity:
      return "MegaMoE dispatch capacity exceeded" + on_rank + ": its experts receive " + std::to_string(st.value) +
             " rows (padded to b_m per expert) but the window holds " + std::to_string(st.target) +
             "; construct the layer with a larger capacity slack (0 = worst case, always enough)";
    case MoeWait::corrupt_routing:
      return "MegaMoE" + on_rank + ": rank " + std::to_string(st.index) + " published pair index " + std::to_string(st.value) +
             ", outside [0, " + std::to_string(st.target) + "); its send lists are corrupt";
    case MoeWait::accumulator_layout:
      return "MegaMoE internal error" + on_rank + ": the wgmma accumulator layout does not pair gate and up columns";
    default:
      return comm::describe_timeout(st, timeout_s, "MegaMoE", wait_name(what),
                                    what == MoeWait::peer_send_ready || what == MoeWait::peer_finished);
  }
}

std::string describe_dropped_router_ids(int rank, std::uint32_t out_of_range, std::uint32_t repeated,
                                        const RouterInputReport* first) {
  const std::uint64_t pairs = std::uint64_t(out_of_range) + repeated;
  std::string m = "MegaMoE bad router input on rank " + std::to_string(rank) + ": " + std::to_string(pairs) +
                  (pairs == 1 ? " (token, expert) pair" : " (token, expert) pairs") + " dropped since the last poll (" +
                  std::to_string(out_of_range) + " with an expert id outside [0, E), " + std::to_string(repeated) +
                  " repeating an expert of the same token)";
  if (first != nullptr) {
    m += "; the first: token " + std::to_string(first->token) + " picks expert " + std::to_string(first->expert);
    if (first->what == static_cast<std::int32_t>(MoeWait::expert_out_of_range))
      m += ", outside [0, " + std::to_string(first->E) + ") (topk_ids must hold global expert ids below E)";
    else
      m += " more than once in its top-k (each of a token's k choices must differ)";
    m += ", in call " + std::to_string(first->epoch);
  }
  return m + ". Those pairs add nothing to their tokens' outputs; the layer goes on";
}

}  // namespace xstage::moe
