// The calibration sweep's grids: what `xstage calibrate` measures on a GPU of a given size.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "calibration/sweep_plan.hpp"
#include "common/error.hpp"

namespace xstage::calibration {
namespace {

TEST(SweepPlan, DefaultGridsKeepHeldOutKOutOfTheFitForAnyGpuSize) {
  for (int sms : {8, 16, 78, 108, 114, 132, 148, 160}) {
    for (auto path : {StorePath::st_global_16B, StorePath::tma_bulk}) {
      for (bool quick : {false, true}) {
        const SweepGrid g = default_grid(sms, path, quick);
        EXPECT_NO_THROW(validate_grid(g, sms, path)) << sms << " SMs";
        EXPECT_EQ(g.K_fit.back(), sms) << "the fit must reach every SM";
        EXPECT_FALSE(g.K_heldout.empty());
        const std::set<int> fit(g.K_fit.begin(), g.K_fit.end());
        for (int k : g.K_heldout) EXPECT_FALSE(fit.count(k)) << "held-out K=" << k << " is a fit K";
        EXPECT_TRUE(std::is_sorted(g.B_bytes.begin(), g.B_bytes.end()));
      }
    }
  }
}

TEST(SweepPlan, TmaBurstsStayWithinSharedMemory) {
  const SweepGrid g = default_grid(132, StorePath::tma_bulk, false);
  EXPECT_LE(g.B_bytes.back(), 128 * 1024);
  EXPECT_EQ(default_grid(132, StorePath::st_global_16B, false).B_bytes.back(), 256 * 1024);
}

TEST(SweepPlan, InvalidGridsNameTheBadValue) {
  SweepGrid g = default_grid(132, StorePath::st_global_16B, false);
  g.K_fit = {16, 500};
  try {
    validate_grid(g, 132, StorePath::st_global_16B);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("K=500 is not in 1..132"), std::string::npos) << e.what();
  }
  g = default_grid(132, StorePath::st_global_16B, false);
  g.K_heldout = {g.K_fit.front()};
  EXPECT_THROW(validate_grid(g, 132, StorePath::st_global_16B), InputError);
  g = default_grid(132, StorePath::st_global_16B, false);
  g.B_bytes = {1000};  // not a multiple of 16 x 256 threads
  EXPECT_THROW(validate_grid(g, 132, StorePath::st_global_16B), InputError);
  g.B_bytes = {1008};  // fine for TMA (multiple of 16) ...
  EXPECT_NO_THROW(validate_grid(g, 132, StorePath::tma_bulk));
  g.B_bytes = {256 * 1024};  // ... but not beyond what shared memory can hold
  EXPECT_THROW(validate_grid(g, 132, StorePath::tma_bulk), InputError);
  EXPECT_THROW(default_grid(4, StorePath::st_global_16B, false), InputError);
}

TEST(SweepPlan, GapSweepSpansBothBranchesOfTheMaxLaw) {
  const std::int64_t V = 132 * 32768;
  const double R = 366.0;
  const auto gaps = gap_sweep_ns(V, R, 16);
  ASSERT_EQ(gaps.size(), 16u);
  EXPECT_EQ(gaps.front(), 0.0);
  EXPECT_NEAR(gaps.back(), 3.0 * V / R, 1e-6);
  EXPECT_TRUE(std::is_sorted(gaps.begin(), gaps.end()));
  EXPECT_GT(plateau_gap_ns(V, R), V / R) << "the plateau gap must exceed the drain time";
  EXPECT_THROW(gap_sweep_ns(V, 0.0, 16), InputError);
}

TEST(SweepPlan, PeriodicLaunchesLastLongEnoughForAFewPercentOverhead) {
  EXPECT_GE(periodic_duration_ns(300.0), 500e3);
  EXPECT_GE(periodic_duration_ns(100e3), 32 * 100e3);
}

TEST(SweepPlan, RoughRComesFromTheLargestVolumes) {
  std::vector<BurstSample> s;
  for (int i = 1; i <= 9; ++i) {
    BurstSample b;
    b.K = 132;
    b.B_bytes = 4096LL * i;
    // Small bursts look issue-bound (fast), large ones drain at 400 bytes/ns.
    b.T_period_ns = i <= 3 ? 300.0 : static_cast<double>(b.V_bytes()) / 400.0;
    s.push_back(b);
  }
  EXPECT_NEAR(rough_R_bytes_per_ns(s), 400.0, 1e-9);
  EXPECT_THROW(rough_R_bytes_per_ns({}), Error);
}

TEST(SweepPlan, IntListsParseOrSayWhatIsWrong) {
  EXPECT_EQ(parse_int_list("16,33,66", "--K"), (std::vector<int>{16, 33, 66}));
  EXPECT_THROW(parse_int_list("16,,33", "--K"), InputError);
  EXPECT_THROW(parse_int_list("16;33", "--K"), InputError);
  EXPECT_THROW(parse_int_list("", "--K"), InputError);
}

}  // namespace
}  // namespace xstage::calibration
