// `xstage calibrate` on a machine without a GPU (CI): every refusal is a clear message and a non-zero exit.
#include <gtest/gtest.h>

#include <string>

#include "cli_run.hpp"

namespace {

using namespace xstage_cli_test;

TEST(CalibrateCli, NoGpuIsAPlatformErrorThatSaysSo) {
  const CliRun r = xstage("calibrate --quick --out /tmp/xstage-calibrate-cli-test");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_CONTAINS(r.err, "xstage: error: no CUDA GPU found");
}

TEST(CalibrateCli, MalformedListsFailBeforeAnyGpuWork) {
  expect_input_error("calibrate --K 16,x", "--K: 'x' is not an integer");
  expect_input_error("calibrate --heldout-K ,", "--heldout-K");
  expect_input_error("calibrate --B-kib 4,8.5", "--B-kib: '8.5' is not an integer");
  expect_input_error("calibrate --gpus -1", "--gpus: must be an integer in [2, 1024] (got -1)");
  expect_input_error("calibrate --paths st_global_16B,,tma_bulk", "--paths: empty element");
  expect_input_error("calibrate --paths tma", "--paths: unknown store path 'tma'");
  expect_input_error("calibrate --out ''", "--out: the path is empty");
}

TEST(CalibrateCli, UnknownOptionsAndValuesAreRejected) {
  const CliRun pairing = xstage("calibrate --pairing sideways");
  EXPECT_NE(pairing.status, 0);
  EXPECT_CONTAINS(pairing.err, "sideways");
  const CliRun unknown = xstage("calibrate --bogus");
  EXPECT_NE(unknown.status, 0);
  EXPECT_CONTAINS(unknown.err, "--bogus");
}

TEST(CalibrateCli, ExternalLauncherEnvironmentIsChecked) {
  const CliRun one = xstage("calibrate", "RANK=0 WORLD_SIZE=1");
  EXPECT_EQ(one.status, 3);
  EXPECT_CONTAINS(one.err, "calibrate needs at least 2 ranks");
  const CliRun bad = xstage("calibrate", "RANK=2 WORLD_SIZE=2");
  EXPECT_EQ(bad.status, 2);
  EXPECT_CONTAINS(bad.err, "RANK=2 is not in [0, WORLD_SIZE=2)");
}

}  // namespace
