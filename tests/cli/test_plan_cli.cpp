// `xstage plan` end to end: run the built binary, check exit status, stdout and stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_run.hpp"

namespace {

namespace fs = std::filesystem;
using namespace xstage_cli_test;

// The paper's published numbers (platforms/paper_reference.json) make the expected values checkable by
// hand; the default platform is the H200 calibration, whose numbers come from a measurement.
const std::string kPaper = std::string("--platform '") + XSTAGE_SOURCE_DIR + "/platforms/paper_reference.json' ";

TEST(PlanCli, DefaultsToTheShippedH200Calibration) {
  const CliRun r = xstage("plan pattern --producers 132 --burst 8KiB --gap 1us,30us");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "h200_nvlink4.json");
  EXPECT_EQ(r.out.find("PROVISIONAL"), std::string::npos) << r.out;
  EXPECT_CONTAINS(r.out, "reshape");    // 1 MiB every 1 µs is far above any NVLink drain
  EXPECT_CONTAINS(r.out, "piggyback");  // 30 µs of gap drains it
}

TEST(PlanCli, PatternWithThePaperNumbersPrintsAVerdict) {
  const CliRun r = xstage("plan " + kPaper + "pattern --producers 132 --burst 32KiB --gap 2us");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "paper_reference.json");
  EXPECT_CONTAINS(r.out, "PROVISIONAL");
  EXPECT_CONTAINS(r.out, "verdict   reshape");
  EXPECT_CONTAINS(r.out, "rate bound      BROKEN");
  EXPECT_CONTAINS(r.out, "capacity bound  holds");
  EXPECT_CONTAINS(r.out, "G* = V/R - T_iss0 = 5.27 us");  // 132*32 KiB/717 - 760 ns
  EXPECT_CONTAINS(r.out, "action    reshape the injection");
  EXPECT_TRUE(r.err.empty()) << r.err;  // K = 132, B = 32 KiB is on the measured grid
}

TEST(PlanCli, OutsideTheMeasuredGridWarns) {
  const CliRun r = xstage("plan " + kPaper + "pattern -K 200 -B 32KiB -G 10us");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.err, "xstage: warning: T_iss0: K = 200 lies above the measured range [16, 148]");
  EXPECT_CONTAINS(r.err, "Q(K): K = 200");
}

// The paper's worked examples at its own K = 148 (§4.3): 148 aligned 32 KiB tiles, V = 4.62 MiB, q_peak =
// 4.11 MiB < Q = 4.25 MiB (capacity bound holds), G* = 6.0 us, and with sigma = 0.79 us per KV tile
// M_ub* = 1.0K tokens.
TEST(PlanCli, ReproducesThePapersWorkedExampleAtK148) {
  const CliRun r = xstage("plan " + kPaper + "pattern -K 148 -B 32KiB -G 10us");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // K = 148 is on the file's grid
  EXPECT_CONTAINS(r.out, "verdict   piggyback");
  EXPECT_CONTAINS(r.out, "G* = V/R - T_iss0 = 6.00 us");
  EXPECT_CONTAINS(r.out, "capacity bound  holds   q_peak = V - R*T_iss0 = 4.11 MiB  vs Q = 4.25 MiB");
  const CliRun a = xstage("plan " + kPaper + "attention -M 8192 -K 148 --sigma 0.79us");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_CONTAINS(a.out, "M_ub* = b_n*ceil(G*/sigma) = 1024 tokens");
  EXPECT_CONTAINS(a.out, "verdict   piggyback");
}

TEST(PlanCli, GapSweepAndSimulation) {
  const CliRun r = xstage("plan " + kPaper + "pattern -K 132 -V 4MiB -G 0,3us,6us --simulate --bursts 40");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "sim T_iss");
  EXPECT_CONTAINS(r.out, "reshape");
  EXPECT_CONTAINS(r.out, "piggyback");

  const CliRun s = xstage("plan " + kPaper + "pattern -K 132 -B 40KiB -G 20us --simulate --stagger 21us");
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_CONTAINS(s.out, "verdict   shrink the burst");
  EXPECT_CONTAINS(s.out, "simulated 132 producers");
}

TEST(PlanCli, JsonOutputIsParseable) {
  const CliRun r = xstage("plan " + kPaper + "pattern -K 132 -B 32KiB -G 2us --json --simulate --jitter 200ns");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc.at("kind"), "pattern");
  EXPECT_EQ(doc.at("platform").at("store_path"), "st_global_16B");
  EXPECT_TRUE(doc.at("platform").at("provisional").get<bool>());
  const nlohmann::json& row = doc.at("gaps").at(0);
  EXPECT_EQ(row.at("verdict"), "reshape");
  EXPECT_NEAR(row.at("G_star_ns").get<double>(), 132 * 32768.0 / 717.0 - 760.0, 1.0);
  EXPECT_GT(row.at("simulation").at("T_iss_ns").at("count").get<int>(), 0);

  // --json may come before the kind too, and the TMA path halves Q.
  const CliRun t = xstage("plan " + kPaper + "--json --store-path tma_bulk pattern -K 132 -B 32KiB -G 2us");
  ASSERT_EQ(t.status, 0) << t.err;
  const nlohmann::json tma = nlohmann::json::parse(t.out);
  EXPECT_NEAR(tma.at("platform").at("Q_bytes").get<double>() / doc.at("platform").at("Q_bytes").get<double>(), 0.5,
              0.01);
  // Half the capacity: the 4.12 MiB aligned burst (q_peak = 3.61 MiB) now overflows Q on its own.
  EXPECT_EQ(tma.at("gaps").at(0).at("verdict"), "shrink_burst");
  EXPECT_FALSE(tma.at("gaps").at(0).at("capacity_bound").at("holds").get<bool>());
}

TEST(PlanCli, MoeFromGemmShapes) {
  const CliRun r = xstage("plan " + kPaper + "moe -K 66 --hidden 4096 --inter 256 --tflops 800");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "expert-wave");
  EXPECT_CONTAINS(r.out, "interleaved");
  EXPECT_CONTAINS(r.out, "D_knee = 37");  // ceil(b_n·K_SM / (2·h_inter)) with the paper's K_SM = 148
  EXPECT_CONTAINS(r.out, "verdict   reshape");

  const CliRun j = xstage("plan " + kPaper + "moe -K 66 --t-l1 22us --t-l2 1.4us --mix 1:8 --json");
  ASSERT_EQ(j.status, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc.at("verdict"), "reshape");
  EXPECT_TRUE(doc.at("interleave_test").at("sufficient").get<bool>());
  EXPECT_TRUE(doc.at("D_knee_rows").is_null());
}

TEST(PlanCli, AttentionSufficientLength) {
  const CliRun r = xstage("plan " + kPaper + "attention --seq-len 512,1024,8192 --sigma 0.79us --heads 24");
  ASSERT_EQ(r.status, 0) << r.err;
  // The platform's K = 148 aligned 32 KiB tiles: G* = 6.00 us, M_ub* = 128*ceil(6000/790) = 1024.
  EXPECT_CONTAINS(r.out, "M_ub* = b_n*ceil(G*/sigma) = 1024 tokens");
  EXPECT_CONTAINS(r.out, "verdict   reshape");  // M = 512 is below M_ub*
  EXPECT_CONTAINS(r.out, "piggyback only for M >= M_ub* = 1024 tokens");

  const CliRun p = xstage("plan " + kPaper + "attention -M 8192,16384 --tflops 600 --json");
  ASSERT_EQ(p.status, 0) << p.err;
  const nlohmann::json doc = nlohmann::json::parse(p.out);
  EXPECT_EQ(doc.at("verdict"), "piggyback");
  EXPECT_EQ(doc.at("seq_lens").size(), 2u);
  EXPECT_DOUBLE_EQ(doc.at("seq_lens").at(0).at("E_drain_ns").get<double>(), 0.0);
  EXPECT_FALSE(doc.contains("fused_both"));
}

TEST(PlanCli, AttentionFusedBothPushAudit) {
  const CliRun r = xstage("plan " + kPaper + "attention -M 4096,16384 --sigma 1us --heads 4 --ranks 2 -K 128 --push-gbps 150");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "fused_both (the pre-attention all-to-all pushed head by head");
  const CliRun j = xstage("plan " + kPaper + "attention -M 4096,16384 --sigma 1us --heads 4 --ranks 2 -K 128 --push-gbps 150 --json");
  ASSERT_EQ(j.status, 0) << j.err;
  const nlohmann::json fb = nlohmann::json::parse(j.out).at("fused_both");
  EXPECT_DOUBLE_EQ(fb.at("push_GBps").get<double>(), 150.0);
  ASSERT_EQ(fb.at("seq_lens").size(), 2u);
  EXPECT_EQ(fb.at("seq_lens").at(0).at("first_wave_heads"), 4);  // 32 m-blocks per head: every head in the first wave
  EXPECT_EQ(fb.at("seq_lens").at(1).at("first_wave_heads"), 1);
  EXPECT_GT(fb.at("seq_lens").at(1).at("hidden_fraction").get<double>(), 0.5);
  expect_input_error("plan attention -M 4096 --sigma 1us --push-gbps 150", "--ranks P >= 2");
  expect_input_error("plan attention -M 4096 --sigma 1us --ranks 2 --push-gbps 0", "--push-gbps");
}

TEST(PlanCli, BadInputsExitTwoWithAMessage) {
  expect_input_error("plan pattern -K 0 -B 32KiB -G 1us", "--producers");
  expect_input_error("plan pattern -K 132 -B -4KiB -G 1us", "must not be negative");
  expect_input_error("plan pattern -K 132 -B 0 -G 1us", "--burst");
  expect_input_error("plan pattern -K 132 -B 32KiB -V 4MiB -G 1us", "exactly one of --burst");
  expect_input_error("plan pattern -K 132 -G 1us", "exactly one of --burst");
  expect_input_error("plan pattern -K 132 -B 32KiB -G '3 weeks'", "unknown time unit");
  expect_input_error("plan pattern -K 132 -B 32furlongs -G 1us", "unknown size unit");
  expect_input_error("plan pattern -K 132 -B 32KiB -G 1us --stagger 1us", "only apply with --simulate");
  expect_input_error("plan pattern -K 5000000 -B 32KiB -G 1us", "--producers: must be an integer in [1, 1000000] (got 5000000)");
  expect_input_error("plan pattern -K 132 -B 32KiB -G 100s", "--gap: time (ns) must be in [0, 1e+10] (got 1e+11)");
  expect_input_error("plan --store-path st_global_8B pattern -K 132 -B 32KiB -G 1us", "unknown store path");
  expect_input_error("plan --platform /nonexistent/p.json pattern -K 132 -B 32KiB -G 1us", "/nonexistent/p.json");
  expect_input_error("plan attention -M 1024", "exactly one of --sigma");
  expect_input_error("plan attention -M 0 --sigma 1us", "--seq-len");
  expect_input_error("plan attention -M 1024 --sigma 1us --out-bytes 3", "--out-bytes");
  expect_input_error("plan attention -M 1024 --sigma 1us --tile 128", "--tile");
  expect_input_error("plan moe -K 66 --t-l1 2us --t-l2 1us", "--mix");
  expect_input_error("plan moe -K 200 --t-l1 2us --t-l2 1us --mix 1:1", "cannot exceed");
  expect_input_error("plan moe -K 66 --t-l1 2us --t-l2 1us --mix 1:0", "--mix");
}

TEST(PlanCli, InvalidPlatformFileIsNamed) {
  const fs::path file = fs::temp_directory_path() / ("xstage_plan_bad_" + std::to_string(::getpid()) + ".json");
  std::ifstream in(std::string(XSTAGE_SOURCE_DIR) + "/platforms/h200_nvlink4.json");
  nlohmann::json doc = nlohmann::json::parse(in);
  doc["store_paths"]["st_global_16B"]["R_bytes_per_ns"] = -717;
  std::ofstream(file) << doc.dump();
  expect_input_error("plan --platform '" + file.string() + "' pattern -K 132 -B 32KiB -G 1us",
                     "/store_paths/st_global_16B/R_bytes_per_ns");
  std::ofstream(file) << "not json";
  expect_input_error("plan --platform '" + file.string() + "' pattern -K 132 -B 32KiB -G 1us", "not valid JSON");
  fs::remove(file);
}

TEST(PlanCli, MissingKindOrOptionFails) {
  const CliRun r = xstage("plan");
  EXPECT_NE(r.status, 0);
  EXPECT_FALSE(r.err.empty());
  const CliRun s = xstage("plan pattern -B 32KiB -G 1us");
  EXPECT_NE(s.status, 0);
  EXPECT_CONTAINS(s.err, "--producers");
}

}  // namespace
