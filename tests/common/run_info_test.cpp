// A result file's numbers (common/run_info.hpp): NaN, what a bench did not measure, is written as null.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/run_info.hpp"

namespace xstage {
namespace {

TEST(RunInfo, NumberOrNullWritesNaNAsNull) {
  EXPECT_TRUE(number_or_null(std::numeric_limits<double>::quiet_NaN()).is_null());
  EXPECT_EQ(number_or_null(1.5).get<double>(), 1.5);
  EXPECT_EQ(number_or_null(0.0).get<double>(), 0.0);
  EXPECT_EQ(number_or_null(-2.0).dump(), "-2.0");
}

}  // namespace
}  // namespace xstage
