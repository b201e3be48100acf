// `xstage plan moe` on a layer (the audit from the kernel's injection per schedule, --choose) and on a bench grid,
// end to end through the built binary (the runner is tests/cli's).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "../cli/cli_run.hpp"

namespace {

using namespace xstage_cli_test;

const std::string kGrid = std::string("'") + XSTAGE_SOURCE_DIR + "/configs/moe_grid.json'";
const std::string kHeadline = "plan moe --hidden 7168 --inter 2048 --experts 256 --top-k 8 --tokens 4096";

TEST(PlanMoeLayer, TextHasEverySchedulesAuditTheClosedFormAndTheChoice) {
  const CliRun r = xstage(kHeadline + " --choose");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* s : {"expert-wave ", "pipelined waves ", "interleaved pairs ", "expert-wave m-pairs", "interleaved m-pairs"})
    EXPECT_CONTAINS(r.out, s);
  EXPECT_CONTAINS(r.out, "tile=128x256 bf16");
  EXPECT_CONTAINS(r.out, "256 rows per expert");
  EXPECT_CONTAINS(r.out, "Aligned closed form (K_act = K_SM = 132");
  EXPECT_CONTAINS(r.out, "verdict shrink the burst");  // the aligned 132 x 32 KiB overflows Q ...
  EXPECT_CONTAINS(r.out, "verdict piggyback");         // ... the predicted K_act does not (expert-wave)
  EXPECT_CONTAINS(r.out, "choice    expert-wave m-pairs  (schedule expert_wave, wave_lag 0, cluster_n 1, cluster_m 2)");
}

TEST(PlanMoeLayer, JsonPerScheduleAndChoice) {
  const CliRun r = xstage(kHeadline + " --dtype fp8 --choose --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc.at("kind"), "moe");
  EXPECT_EQ(doc.at("config"), "h7168-i2048-e256-k8/t4096/fp8");
  EXPECT_EQ(doc.at("problem").at("b_n"), 256);
  EXPECT_DOUBLE_EQ(doc.at("assumptions").at("tflops").get<double>(), 790.0);
  ASSERT_EQ(doc.at("schedules").size(), 6u);
  for (const auto& s : doc.at("schedules")) {
    EXPECT_GT(s.at("combine").at("K_act").at("mean").get<double>(), 1.0);
    EXPECT_GE(s.at("combine").at("stall_ns").at("mean").get<double>(), 0.0);
    EXPECT_GT(s.at("lockstep").at("tile_phase_ns").get<double>(), 0.0);
    EXPECT_EQ(s.at("aligned_closed_form").at("K_act"), 132);
  }
  const auto& c = doc.at("choice");
  EXPECT_EQ(c.at("schedule"), "interleaved");
  EXPECT_EQ(c.at("cluster_n"), 1);
  EXPECT_EQ(c.at("cluster_m"), 2);  // 256 rows per expert fill a pair's rows
  EXPECT_EQ(c.at("candidates").size(), 6u);
  EXPECT_FALSE(c.at("reason").get<std::string>().empty());
}

TEST(PlanMoeLayer, GridGivesEveryConfigurationOnce) {
  const CliRun r = xstage("plan moe --grid " + kGrid + " --choose --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  const auto& configs = doc.at("configs");
  EXPECT_EQ(configs.size(), 30u);  // (7 shapes x 2 token counts + the headline) x 2 dtypes
  std::set<std::string> names;
  for (const auto& c : configs) {
    names.insert(c.at("config").get<std::string>());
    EXPECT_FALSE(c.at("choice").is_null());
  }
  EXPECT_EQ(names.size(), configs.size());
  EXPECT_TRUE(names.count("deepseek-v3:h7168-i2048-e256-k8/t4096/bf16"));
  EXPECT_TRUE(names.count("h1152-i4608-e8-k2/t8192/fp8"));
}

TEST(PlanMoeLayer, BadInputsExitTwoWithAMessage) {
  expect_input_error("plan moe --hidden 7168 --inter 2048 --experts 256 --top-k 8", "--tokens");
  expect_input_error("plan moe --hidden 7168 --inter 2048 --tflops 500 --choose", "--choose needs the layer");
  expect_input_error("plan moe --hidden 7168 --inter 2048 --tflops 500", "--producers");
  expect_input_error(kHeadline + " -K 60", "leave out --producers");
  expect_input_error(kHeadline + " --tile 64x128", "--tile");
  expect_input_error(kHeadline + " --dtype fp4", "bf16 or fp8");
  expect_input_error(kHeadline + " --jitter 1.5", "--jitter");
  expect_input_error(kHeadline + " --t-l1 3us", "leave out --t-l1");
  expect_input_error("plan moe --grid " + kGrid + " --hidden 7168", "--grid takes the shapes");
  expect_input_error("plan moe --grid /nonexistent/grid.json", "/nonexistent/grid.json");
  expect_input_error("plan moe --hidden 7168 --inter 2048 --experts 255 --top-k 8 --tokens 4096", "cannot be split evenly");
}

}  // namespace

namespace {

using namespace xstage_cli_test;

TEST(PlanMoeLayer, RuleConstantsCanBeReplaced) {
  const std::string head = "plan moe --hidden 7168 --inter 2048 --experts 256 --top-k 8 --tokens 4096 --choose --json";
  const nlohmann::json a = nlohmann::json::parse(xstage(head).out);
  const CliRun r = xstage(head + " --rule factor_interleaved_bf16=0.9 --rule skew_hedge_waves=0");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json b = nlohmann::json::parse(r.out);
  EXPECT_EQ(a.at("choice").at("schedule"), "expert_wave");
  EXPECT_EQ(b.at("choice").at("schedule"), "interleaved");  // a 10% cheaper interleaved mainloop flips the headline
  expect_input_error(head + " --rule nonsense=1", "unknown constant");
  expect_input_error(head + " --rule time_jitter=2", "time_jitter");
  expect_input_error(head + " --rule factor_pipelined=x", "not a number");
  expect_input_error("plan moe --hidden 7168 --inter 2048 --experts 256 --top-k 8 --tokens 4096 --rule time_jitter=0", "--choose");
}

}  // namespace
