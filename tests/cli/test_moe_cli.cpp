// `xstage moe` on a machine without a GPU (CI): bad arguments are refused with a message naming them and
// exit 2 before any rank or GPU exists; a good command without a GPU is a platform error (exit 3).
#include <gtest/gtest.h>

#include <string>

#include "cli_run.hpp"

namespace {

using namespace xstage_cli_test;

TEST(MoeCli, BadArgumentsFailBeforeAnyGpuWork) {
  expect_input_error("moe check --impl nope", "--impl: unknown implementation 'nope'");
  expect_input_error("moe bench --impl ,", "--impl: name at least one implementation");
  expect_input_error("moe bench --filter no-such-config", "no configuration in");
  expect_input_error("moe check --cases zzz", "moe check: no case matches --cases 'zzz'");
  expect_input_error("moe bench --trials 0", "--trials must be at least 1");
  expect_input_error("moe bench --device-timeout-s 0", "--device-timeout-s must be a positive number");
  expect_input_error("moe check --lead -1", "--lead must be at least 1");
  expect_input_error("moe check --wave -2", "--wave must be at least 1");
  expect_input_error("moe check --gpus -1", "--gpus must be at least 1");
  expect_input_error("moe bench --config /nonexistent/grid.json", "/nonexistent/grid.json");
}

TEST(MoeCli, TileWidthIsOneOfTheKernelsTiles) {
  const CliRun r = xstage("moe bench --tile-n 64");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.err, "--tile-n");
}

TEST(MoeCli, NoGpuIsAPlatformErrorThatSaysSo) {
  const CliRun r = xstage("moe check --cases k2-balanced");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_CONTAINS(r.err, "no CUDA GPU found");
}

}  // namespace
