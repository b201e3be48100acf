// The messages the fused MoE layer turns a device-side failure record into: each names what failed, where,
// and what to do.
#include <gtest/gtest.h>

#include <string>

#include "moe/kernel/status.hpp"

namespace xstage::moe {
namespace {

comm::DeviceStatus record(MoeWait what, int index, std::uint32_t value, std::uint32_t target) {
  comm::DeviceStatus st{};
  st.failed = 1;
  st.what = static_cast<std::int32_t>(what);
  st.rank = 1;
  st.cta = 7;
  st.index = index;
  st.value = value;
  st.target = target;
  st.epoch = 3;
  return st;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MegaMoeStatus, TimeoutsNameTheCounterTheValueAndTheCall) {
  const std::string m = describe(record(MoeWait::dispatch_ready, 12, 64, 128), 10);
  EXPECT_EQ(m, "MegaMoE timed out after 10 s on rank 1, CTA 7 waiting for dispatch_ready of scheduler row[12] = 64 "
               "(needs 128) in call 3");
  EXPECT_TRUE(has(describe(record(MoeWait::l1_done, 5, 1, 32), 0.3), "after 0.3 s"));
  EXPECT_TRUE(has(describe(record(MoeWait::l1_done, 5, 1, 32), 0.3), "l1_done of ring slot[5] = 1 (needs 32)"));
  EXPECT_TRUE(has(describe(record(MoeWait::l2_done, 2, 0, 56), 1), "l2_done of ring slot[2]"));
  // No index for the one counter that has none.
  EXPECT_TRUE(has(describe(record(MoeWait::combine_arrived, -1, 10, 20), 1), "stored by the owners) = 10 (needs 20)"));
}

TEST(MegaMoeStatus, AMissingPeerIsNamedAndExplained) {
  for (MoeWait w : {MoeWait::peer_send_ready, MoeWait::peer_finished}) {
    const std::string m = describe(record(w, 0, 2, 3), 10);
    EXPECT_TRUE(has(m, "peer rank[0]")) << m;
    EXPECT_TRUE(has(m, "that rank never got there")) << m;
  }
  EXPECT_FALSE(has(describe(record(MoeWait::l1_done, 0, 2, 3), 10), "never got there"));
}

TEST(MegaMoeStatus, NonWaitFailuresSayWhatToDo) {
  const std::string cap = describe(record(MoeWait::capacity, -1, 4224, 2560), 10);
  EXPECT_TRUE(has(cap, "dispatch capacity exceeded on rank 1")) << cap;
  EXPECT_TRUE(has(cap, "receive 4224 rows")) << cap;
  EXPECT_TRUE(has(cap, "holds 2560")) << cap;
  EXPECT_TRUE(has(cap, "larger capacity slack")) << cap;
  const std::string bad = describe(record(MoeWait::corrupt_routing, 0, 99999, 4096), 10);
  EXPECT_TRUE(has(bad, "rank 0 published pair index 99999, outside [0, 4096)")) << bad;
  EXPECT_TRUE(has(describe(record(MoeWait::accumulator_layout, 3, 0, 0), 10), "internal error"));
}

TEST(MegaMoeStatus, DroppedRouterIdsAreCountedAndTheFirstNamed) {
  RouterInputReport first{};
  first.what = static_cast<std::int32_t>(MoeWait::expert_out_of_range);
  first.token = 17;
  first.expert = -3;
  first.E = 64;
  first.epoch = 4;
  const std::string range = describe_dropped_router_ids(1, 2, 1, &first);
  EXPECT_TRUE(has(range, "bad router input on rank 1: 3 (token, expert) pairs dropped since the last poll")) << range;
  EXPECT_TRUE(has(range, "(2 with an expert id outside [0, E), 1 repeating an expert of the same token)")) << range;
  EXPECT_TRUE(has(range, "the first: token 17 picks expert -3, outside [0, 64)")) << range;
  EXPECT_TRUE(has(range, "in call 4")) << range;
  EXPECT_TRUE(has(range, "the layer goes on")) << range;
  first.what = static_cast<std::int32_t>(MoeWait::duplicate_expert);
  first.token = 5;
  first.expert = 9;
  const std::string twice = describe_dropped_router_ids(0, 0, 1, &first);
  EXPECT_TRUE(has(twice, "1 (token, expert) pair dropped")) << twice;
  EXPECT_TRUE(has(twice, "token 5 picks expert 9 more than once")) << twice;
  EXPECT_FALSE(has(twice, "timed out")) << twice;
  // A pair dropped while the host re-armed the sample is counted without one.
  const std::string unsampled = describe_dropped_router_ids(0, 1, 0, nullptr);
  EXPECT_TRUE(has(unsampled, "1 (token, expert) pair dropped")) << unsampled;
  EXPECT_FALSE(has(unsampled, "the first")) << unsampled;
}

TEST(MegaMoeStatus, InKernelWaitsAreNamed) {
  EXPECT_TRUE(has(describe(record(MoeWait::pipeline_full, 2, 0, 1), 10), "waiting for the TMA loads of pipeline stage[2]"));
  EXPECT_TRUE(has(describe(record(MoeWait::staging_empty, 0, 0, 1), 10), "the storers to free staging slot[0]"));
}

}  // namespace
}  // namespace xstage::moe
