#include "comm/device_status.hpp"

#include <cstdio>

namespace xstage::comm {

std::string describe_timeout(const DeviceStatus& st, double timeout_s, const std::string& op, const std::string& what,
                             bool written_by_a_peer) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
  std::string index;
  if (st.index >= 0) index = "[" + std::to_string(st.index) + "]";
  return op + " timed out after " + seconds + " s on rank " + std::to_string(st.rank) + ", CTA " + std::to_string(st.cta) +
         " waiting for " + what + index + " = " + std::to_string(st.value) + " (needs " + std::to_string(st.target) +
         ") in call " + std::to_string(st.epoch) +
         (written_by_a_peer ? ": that rank never got there (crashed, or runs a different layer/shape)" : "");
}

}  // namespace xstage::comm
