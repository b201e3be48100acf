#include "moe/megamoe_status.hpp"

#include <cstdio>

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
    default: return "?";
  }
}

std::string seconds(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", t);
  return buf;
}

}  // namespace

std::string describe(const MoeDeviceStatus& st, double timeout_s) {
  const auto what = static_cast<MoeWait>(st.what);
  if (what == MoeWait::capacity)
    return "MegaMoE dispatch capacity exceeded on rank " + std::to_string(st.rank) + ": its experts receive " + std::to_string(st.value) +
           " rows (padded to b_m per expert) but the window holds " + std::to_string(st.target) +
           "; construct the layer with a larger capacity slack (0 = worst case, always enough)";
  if (what == MoeWait::corrupt_routing)
    return "MegaMoE on rank " + std::to_string(st.rank) + ": rank " + std::to_string(st.index) + " published pair index " + std::to_string(st.value) +
           ", outside [0, " + std::to_string(st.target) + "); its send lists are corrupt";
  if (what == MoeWait::accumulator_layout)
    return "MegaMoE internal error on rank " + std::to_string(st.rank) + ": the wgmma accumulator layout does not pair gate and up columns";
  std::string index;
  if (st.index >= 0) index.append("[").append(std::to_string(st.index)).append("]");
  return "MegaMoE timed out after " + seconds(timeout_s) + " s on rank " + std::to_string(st.rank) + ", CTA " + std::to_string(st.cta) +
         " waiting for " + wait_name(what) + index + " = " + std::to_string(st.value) + " (needs " + std::to_string(st.target) + ") in call " +
         std::to_string(st.epoch) + (what == MoeWait::peer_send_ready || what == MoeWait::peer_finished
                            ? ": that rank never got there (crashed, or runs a different layer/shape)"
                            : "");
}

}  // namespace xstage::moe
