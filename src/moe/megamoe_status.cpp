#include "moe/megamoe_status.hpp"

#include <cstdio>

namespace xstage::moe {
namespace {

std::string s(long long v) { return std::to_string(v); }

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
    return "MegaMoE dispatch capacity exceeded on rank " + s(st.rank) + ": its experts receive " + s(st.value) +
           " rows (padded to b_m per expert) but the window holds " + s(st.target) +
           "; construct the layer with a larger capacity slack (0 = worst case, always enough)";
  if (what == MoeWait::corrupt_routing)
    return "MegaMoE on rank " + s(st.rank) + ": rank " + s(st.index) + " published pair index " + s(st.value) +
           ", outside [0, " + s(st.target) + "); its send lists are corrupt";
  if (what == MoeWait::accumulator_layout)
    return "MegaMoE internal error on rank " + s(st.rank) + ": the wgmma accumulator layout does not pair gate and up columns";
  std::string index;
  if (st.index >= 0) index.append("[").append(s(st.index)).append("]");
  return "MegaMoE timed out after " + seconds(timeout_s) + " s on rank " + s(st.rank) + ", CTA " + s(st.cta) +
         " waiting for " + wait_name(what) + index + " = " + s(st.value) + " (needs " + s(st.target) + ") in call " +
         s(st.epoch) + (what == MoeWait::peer_send_ready || what == MoeWait::peer_finished
                            ? ": that rank never got there (crashed, or runs a different layer/shape)"
                            : "");
}

}  // namespace xstage::moe
