// The fused layer's front door (moe/plan.hpp): the schedule names, the one legality check (why_not) with and
// without a device, and what plan_layer decides (pairing, scheduler rows, kernel configuration, window).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/error.hpp"
#include "moe/plan.hpp"
#include "moe/schedule/auto_schedule.hpp"
#include "moe/schedule/schedule_host.hpp"
#include "moe/schedule/scheduler.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

constexpr int kH200Sms = 132;  // the SM count the schedule rule and the grid tests were measured with

DeviceFacts gpu(int sms) {
  DeviceFacts d;
  d.device = 0;
  d.sm_count = sms;
  d.cc_major = 9;
  return d;
}

MoeLayerRequest request(int h, int I, int E, int k, int T, DType dtype = DType::bf16, int P = 2) {
  MoeLayerRequest r;
  r.problem = test::layer_problem(h, I, E, k, T, dtype, default_tile_n(dtype, h, I), P);
  return r;
}

MoeLayerRequest deepseek(DType dtype = DType::bf16) { return request(7168, 2048, 256, 8, 4096, dtype); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MoePlan, ScheduleNamesAreTheOneList) {
  std::set<std::string> names;
  for (const NamedSchedule& n : kNamedSchedules) {
    EXPECT_EQ(&named_schedule(n.name), &n);
    names.insert(n.name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"auto", "interleaved", "expert_wave", "pipelined_waves"}));
  MoeLayerRequest r;
  r.set_schedule("pipelined_waves");
  EXPECT_FALSE(r.automatic);
  EXPECT_EQ(r.schedule, MoeScheduleKind::expert_wave);
  EXPECT_EQ(r.wave_lag, 1);
  r.set_schedule("auto");
  EXPECT_TRUE(r.automatic);
  EXPECT_STREQ(schedule_name(MoeScheduleKind::interleaved), "interleaved");
  EXPECT_STREQ(schedule_name(MoeScheduleKind::expert_wave), "expert_wave");
  try {
    named_schedule("waves");
    FAIL() << "an unknown name must be refused";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "schedule is 'waves'; it must be one of auto, interleaved, expert_wave, pipelined_waves")) << e.what();
  }
}

TEST(MoePlan, WhyNotIsEmptyForTheHeadlineShapes) {
  for (DType dtype : {DType::bf16, DType::fp8_e4m3})
    for (const char* schedule : {"auto", "interleaved", "expert_wave", "pipelined_waves"}) {
      MoeLayerRequest r = deepseek(dtype);
      r.set_schedule(schedule);
      EXPECT_EQ(why_not(r, DeviceFacts{}), "") << schedule;
      EXPECT_EQ(why_not(r, gpu(kH200Sms)), "") << schedule;
    }
}

TEST(MoePlan, WhyNotNamesWhatIsWrongInTheRequestsTerms) {
  auto why = [](MoeLayerRequest r) { return why_not(r, gpu(kH200Sms)); };
  MoeLayerRequest r = deepseek(DType::fp8_e4m3);
  r.problem.b_n = 128;
  EXPECT_TRUE(has(why(r), "the fused fp8 kernel needs 256-wide tiles")) << why(r);
  r = deepseek();
  r.problem.P_ranks = 9;
  EXPECT_TRUE(has(why(r), "1 to 8 ranks")) << why(r);
  r = deepseek();
  r.cluster_n = 3;
  EXPECT_TRUE(has(why(r), "cluster_n is 3; it must be 0 (automatic), 1 or 2")) << why(r);
  r = deepseek();
  r.cluster_n = 2;
  r.cluster_m = 2;
  EXPECT_TRUE(has(why(r), "do not combine")) << why(r);
  r = deepseek();
  r.wave_experts = 129;
  EXPECT_TRUE(has(why(r), "wave_experts is 129; it must be 0 (automatic) to 128")) << why(r);
  r = deepseek();
  r.capacity_slack = 0.5;
  EXPECT_TRUE(has(why(r), "capacity_slack is 0.5")) << why(r);
  r = deepseek();
  r.timeout_s = 0;
  EXPECT_TRUE(has(why(r), "timeout_s is 0")) << why(r);
  r = request(1024, 512, 1024, 2, 64, DType::bf16, 1);
  EXPECT_TRUE(has(why(r), "1024 experts per rank is more than the kernel's shared-memory tables hold")) << why(r);
  // No CLI flag names in the library's messages.
  for (const std::string& m : {why(deepseek(DType::fp8_e4m3)), why(r)}) EXPECT_FALSE(has(m, "--")) << m;
}

// The one pairing rule: the DiT-like h = 1152 with 256-wide tiles has a half-full last Linear-2 block, which has
// no partner; the SM count's parity counts only once the device is known.
TEST(MoePlan, PairsFollowTheOnePairingRule) {
  MoeLayerRequest dit = request(1152, 4608, 16, 2, 4096, DType::fp8_e4m3);
  ASSERT_EQ(dit.problem.b_n, 256);
  dit.cluster_n = 2;
  EXPECT_TRUE(has(why_not(dit, DeviceFacts{}), "CTA pairs need even Linear-1 and Linear-2 n-block counts")) << why_not(dit, DeviceFacts{});
  MoeLayerRequest r = deepseek();
  r.cluster_m = 2;
  EXPECT_EQ(why_not(r, DeviceFacts{}), "");
  EXPECT_EQ(why_not(r, gpu(kH200Sms)), "");
  EXPECT_TRUE(has(why_not(r, gpu(kH200Sms - 1)), "an even K_SM")) << why_not(r, gpu(kH200Sms - 1));
  // Left open, pairs only for the interleaved schedule and only where they apply.
  r = deepseek();
  EXPECT_EQ(plan_layer(r, gpu(kH200Sms)).cluster_n, 2);
  r.set_schedule("expert_wave");
  EXPECT_EQ(plan_layer(r, gpu(kH200Sms)).cluster_n, 1);
  dit.cluster_n = 0;
  EXPECT_EQ(plan_layer(dit, gpu(kH200Sms)).cluster_n, 1);
  EXPECT_EQ(plan_layer(dit, gpu(kH200Sms)).config, MegaMoeConfigId::fp8_n256_half);
}

TEST(MoePlan, PlanHasTheKernelsScheduleRowsConfigurationAndWindow) {
  MoeLayerRequest r = deepseek();
  r.set_schedule("expert_wave");
  r.cluster_m = 2;
  r.capacity_slack = 1.5;
  const MoeLayerPlan p = plan_layer(r, gpu(kH200Sms));
  EXPECT_EQ(p.problem.b_m, 256);  // M-pairs run 256-row scheduler rows
  EXPECT_EQ(r.problem.b_m, 128);  // and the request is left as it was
  EXPECT_EQ(p.config, MegaMoeConfigId::bf16_n256_mpairs);
  EXPECT_EQ(p.grid, kH200Sms);
  EXPECT_EQ(p.wave_experts, wave_size_experts(p.problem, kH200Sms / 2));
  EXPECT_EQ(p.window.dispatch.capacity_rows, expected_capacity_rows(p.problem, 1.5));
  EXPECT_EQ(p.window.ring.slots, p.window.dispatch.capacity_rows / 256);
  EXPECT_GT(p.window.total_bytes, 0);
  EXPECT_EQ(p.reason, "as configured");
  EXPECT_EQ(p.name(), "megamoe-expert-wave W=" + std::to_string(p.wave_experts) + " 128x256 m-pairs");

  r = deepseek();
  r.D_rows = 7;
  const MoeLayerPlan q = plan_layer(r, gpu(kH200Sms));
  EXPECT_EQ(q.name(), "megamoe-interleaved D=7 128x256 pairs");
  EXPECT_EQ(q.wave_lag, 0);
  EXPECT_EQ(q.window.dispatch.capacity_rows, worst_case_capacity_rows(q.problem));
  r.D_rows = 0;
  EXPECT_EQ(plan_layer(r, gpu(kH200Sms)).D_rows, interleave_lead_rows(r.problem, kH200Sms));
}

TEST(MoePlan, AutomaticIsTheScheduleRulesChoice) {
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    MoeLayerRequest r = deepseek(dtype);
    r.set_schedule("auto");
    r.cluster_n = 1;  // ignored: the rule picks the pairing too
    const MoeLayerPlan p = plan_layer(r, gpu(kH200Sms));
    const ScheduleChoice c = choose_schedule(r.problem, kH200Sms);
    EXPECT_EQ(p.schedule, c.schedule);
    EXPECT_EQ(p.wave_lag, c.wave_lag);
    EXPECT_EQ(p.cluster_n, c.cluster_n);
    EXPECT_EQ(p.cluster_m, c.cluster_m);
    EXPECT_EQ(p.reason, c.reason);
    EXPECT_TRUE(p.name().rfind("megamoe-auto: ", 0) == 0) << p.name();
  }
}

TEST(MoePlan, RefusesWithWhyNotsReasonAndNeedsADevice) {
  MoeLayerRequest r = deepseek();
  r.cluster_n = 2;
  r.cluster_m = 2;
  try {
    plan_layer(r, gpu(kH200Sms));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), why_not(r, gpu(kH200Sms)));
  }
  EXPECT_THROW(plan_layer(deepseek(), DeviceFacts{}), Error);
}

TEST(MoePlan, EveryBuiltConfigurationIsFoundByItsColumns) {
  std::set<std::string> names;
  for (const MegaMoeConfigSpec& c : kMegaMoeConfigs) {
    EXPECT_EQ(megamoe_config_id(c.dtype, c.b_n, c.half_l2, c.cluster_n, c.cluster_m), c.id);
    EXPECT_EQ(&spec_of(c.id), &c);
    names.insert(to_string(c.id));
  }
  EXPECT_EQ(names.size(), std::size(kMegaMoeConfigs));
  EXPECT_THROW(megamoe_config_id(DType::fp8_e4m3, 128, false, 1, 1), InputError);
  EXPECT_THROW(megamoe_config_id(DType::bf16, 256, true, 2, 1), InputError);
}

}  // namespace
}  // namespace xstage::moe
