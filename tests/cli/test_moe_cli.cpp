// `xstage moe` on a machine without a GPU (CI): bad arguments are refused with a message naming them and
// exit 2 before any rank or GPU exists; a good command without a GPU is a platform error (exit 3).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.hpp"

namespace {

using namespace xstage_cli_test;

TEST(MoeCli, BadArgumentsFailBeforeAnyGpuWork) {
  expect_input_error("moe check --impl nope", "--impl: unknown implementation 'nope'");
  expect_input_error("moe bench --impl ,", "--impl: empty element");
  expect_input_error("moe bench --filter no-such-config", "no configuration in");
  expect_input_error("moe check --cases zzz", "moe check: no case matches --cases 'zzz'");
  expect_input_error("moe bench --trials 0", "--trials: must be an integer in [1, 100000] (got 0)");
  expect_input_error("moe bench --trial-gap-ms -1", "--trial-gap-ms: must be a number in [0, 10000] (got -1)");
  expect_input_error("moe bench --device-timeout-s 0", "--device-timeout-s: must be a number in [0.001, 86400]");
  expect_input_error("moe check --lead -1", "--lead: must be an integer in [1, 1048576] (got -1)");
  expect_input_error("moe check --wave -2", "--wave: must be an integer in [1, 65536] (got -2)");
  expect_input_error("moe check --gpus -1", "--gpus: must be an integer in [1, 1024] (got -1)");
  expect_input_error("moe bench --config /nonexistent/grid.json", "/nonexistent/grid.json");
}

// Every implementation name the help lists is accepted (only the missing GPU stops the command).
TEST(MoeCli, EveryImplementationNameIsAccepted) {
  const CliRun r = xstage("moe check --cases k2-balanced --impl unfused-loop,unfused-grouped,megamoe-wave,"
                          "megamoe-wave-pipelined,megamoe-interleaved");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_CONTAINS(r.err, "no CUDA GPU found");
  expect_input_error("moe check --impl megamoe-pipelined", "--impl: unknown implementation 'megamoe-pipelined'");
}

TEST(MoeCli, DtypesAreBf16OrFp8) {
  expect_input_error("moe check --dtype nope", "--dtype: unknown dtype 'nope' (choose from bf16, fp8)");
  expect_input_error("moe bench --dtype fp16,bf16", "--dtype: unknown dtype 'fp16'");
  expect_input_error("moe bench --dtype ,", "--dtype: empty element");
  // Every grid name ends in its dtype: the fp8 configurations hold none named ".../bf16".
  expect_input_error("moe bench --dtype fp8 --filter /bf16", "matches --filter '/bf16' with --dtype 'fp8'");
  for (const char* good : {"moe check --dtype fp8 --cases k2-balanced", "moe bench --dtype bf16,fp8 --filter deepseek-v3",
                           "moe bench --dtype fp8 --filter /fp8"}) {
    const CliRun r = xstage(good);
    EXPECT_EQ(r.status, 3) << good << "\n" << r.err;  // valid arguments: only the missing GPU stops it
    EXPECT_CONTAINS(r.err, "no CUDA GPU found");
  }
}

TEST(MoeCli, GridNamesItsDtypes) {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() / ("xstage_moe_grid_" + std::to_string(::getpid()) + ".json");
  const std::string shapes =
      R"("shapes": [{"h": 256, "h_inter": 128, "E": 8, "k": 2}], "tokens_per_rank": [64], "routings": ["balanced"])";
  auto write = [&](const std::string& text) { std::ofstream(file) << text; };
  write("{" + shapes + "}");  // the old single "dtype" or none at all: refused, naming the key
  expect_input_error("moe bench --config " + file.string(), "/dtypes: missing");
  write(R"({"dtypes": ["bf16", "int4"], )" + shapes + "}");
  expect_input_error("moe bench --config " + file.string(), "/dtypes/1: must be one of \"bf16\", \"fp8\" (got \"int4\")");
  write(R"({"dtypes": [], )" + shapes + "}");
  expect_input_error("moe bench --config " + file.string(), "/dtypes: must hold 1 to 2 elements (got 0)");
  write(R"({"dtypes": ["bf16"], )" + shapes + "}");  // a grid without fp8 has no fp8 configuration
  expect_input_error("moe bench --dtype fp8 --config " + file.string(), "with --dtype 'fp8'");
  write(R"({"dtypes": ["bf16", "fp8"], )" + shapes + "}");
  for (const char* filter : {"h256-i128-e8-k2/t64/balanced/bf16", "h256-i128-e8-k2/t64/balanced/fp8"}) {
    const CliRun r = xstage("moe bench --config " + file.string() + " --filter " + filter);
    EXPECT_EQ(r.status, 3) << filter << "\n" << r.err;
  }
  fs::remove(file);
}

TEST(MoeCli, TileWidthIsOneOfTheKernelsTiles) {
  const CliRun r = xstage("moe bench --tile-n 64");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.err, "--tile-n");
}

TEST(MoeCli, ClusterIsOneOrTwoCtas) {
  for (const char* bad : {"0", "3", "pairs"}) {
    const CliRun r = xstage(std::string("moe check --cluster ") + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_CONTAINS(r.err, "--cluster");
  }
}

TEST(MoeCli, ClusterAlongMIsOneOrTwoCtas) {
  for (const char* bad : {"0", "4", "m"}) {
    const CliRun r = xstage(std::string("moe bench --cluster-m ") + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_CONTAINS(r.err, "--cluster-m");
  }
}

TEST(MoeCli, NoGpuIsAPlatformErrorThatSaysSo) {
  const CliRun r = xstage("moe check --cases k2-balanced");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_CONTAINS(r.err, "no CUDA GPU found");
}

}  // namespace
