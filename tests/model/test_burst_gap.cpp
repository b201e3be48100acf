// Closed forms of the Burst–Gap model (Eq. 1–6, 10): properties and the paper's worked numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "model/burst_gap.hpp"
#include "model/units.hpp"

namespace xstage::model {
namespace {

// The paper's platform (§3.3–3.5): R = 717 GB/s, Q = 4.25 MiB, T_iss0 = 0.76 us at K = 148, B = 32 KiB.
constexpr PlatformPoint kPaper{760.0, 717.0, 4.25 * MiB};
constexpr int kPaperK = 148;
constexpr double kPaperB = 32 * KiB;
constexpr double kPaperV = kPaperK * kPaperB;

TEST(BurstGapPaper, WorkedExampleMatchesPublishedNumbers) {
  // V = 148 x 32 KiB = 4.625 MiB ("about 4.6 MiB").
  EXPECT_NEAR(kPaperV / MiB, 4.6, 0.05);
  // q_peak = V - R*T_iss0 = 4,849,664 - 544,920 bytes, "about 4.1 MiB < Q".
  const double q_peak = peak_outstanding_bytes(kPaper, kPaperV);
  EXPECT_NEAR(q_peak, 4849664.0 - 717.0 * 760.0, 1e-6);
  EXPECT_NEAR(q_peak / MiB, 4.1, 0.05);
  EXPECT_LT(q_peak, kPaper.Q_bytes);
  // G* = V/R - T_iss0 = 4,849,664/717 - 760 = 6003.8 ns, "about 6.0 us".
  const double G_star = recovery_gap_ns(kPaper, kPaperV);
  EXPECT_NEAR(G_star, 4849664.0 / 717.0 - 760.0, 1e-9);
  EXPECT_NEAR(G_star / 1e3, 6.0, 0.05);
  // The isolated knee: T_iso leaves T_iss0 at V = Q + R*T_iss0 ~ 4.77 MiB (~33 KB per producer at K=148).
  const double V_knee = kPaper.Q_bytes + kPaper.R_bytes_per_ns * kPaper.T_iss0_ns;
  EXPECT_NEAR(V_knee / MiB, 4.77, 0.01);
  EXPECT_NEAR(V_knee / kPaperK / KiB, 33.0, 0.3);  // per producer
  EXPECT_DOUBLE_EQ(isolated_issue_time_ns(kPaper, V_knee * 0.99), kPaper.T_iss0_ns);
  EXPECT_GT(isolated_issue_time_ns(kPaper, V_knee * 1.01), kPaper.T_iss0_ns);
}

TEST(BurstGapPaper, DesignTestAtTheRecoveryGap) {
  const DesignTest just_short = design_test(kPaper, kPaperV, 5000.0);
  EXPECT_TRUE(just_short.capacity_bound_holds);
  EXPECT_FALSE(just_short.rate_bound_holds);
  EXPECT_EQ(just_short.verdict, Verdict::reshape);
  EXPECT_NEAR(just_short.gap_margin_ns, 5000.0 - 6003.8, 0.1);
  EXPECT_NEAR(just_short.dT_iss_ns, 6003.8 - 5000.0, 0.1);
  EXPECT_NE(just_short.action.find("reshape"), std::string::npos);

  const DesignTest enough = design_test(kPaper, kPaperV, 80000.0);  // the paper's 80 us Q-loop at M = 8K
  EXPECT_TRUE(enough.rate_bound_holds);
  EXPECT_TRUE(enough.capacity_bound_holds);
  EXPECT_EQ(enough.verdict, Verdict::piggyback);
  EXPECT_NEAR(enough.G_ns / enough.G_star_ns, 13.3, 0.1);  // "about 13 times the worst-case G*"
  EXPECT_DOUBLE_EQ(enough.T_iss_ns, kPaper.T_iss0_ns);
  EXPECT_NEAR(enough.capacity_margin_bytes, kPaper.Q_bytes - (4849664.0 - 544920.0), 1e-6);
}

TEST(BurstGapPaper, BurstAboveTheKneeMustShrink) {
  const double V = kPaperK * 40 * KiB;  // 40 KiB per producer: past the ~33 KB knee
  const DesignTest t = design_test(kPaper, V, 1e6);
  EXPECT_FALSE(t.capacity_bound_holds);
  EXPECT_TRUE(t.rate_bound_holds);
  EXPECT_EQ(t.verdict, Verdict::shrink_burst);
  EXPECT_NEAR(t.T_iss_ns, (V - kPaper.Q_bytes) / kPaper.R_bytes_per_ns, 1e-9);  // Eq. 6 even at a huge gap
  EXPECT_NEAR(t.V_max_capacity_bytes, kPaper.Q_bytes + 717.0 * 760.0, 1e-6);
  EXPECT_NE(t.action.find("shrink"), std::string::npos);
}

TEST(BurstGapProperties, IssueTimeIsNonIncreasingInGapAndFlatBeyondGStar) {
  for (double V : {0.25 * MiB, 2.0 * MiB, kPaperV, 12.0 * MiB}) {
    const double G_star = recovery_gap_ns(kPaper, V);
    double previous = issue_time_ns(kPaper, V, 0.0);
    for (double G = 0.0; G <= 3.0 * G_star + 5000.0; G += 37.0) {
      const double T = issue_time_ns(kPaper, V, G);
      EXPECT_LE(T, previous + 1e-9) << "V=" << V << " G=" << G;
      EXPECT_GE(T, kPaper.T_iss0_ns);
      if (G >= G_star) {
        EXPECT_DOUBLE_EQ(T, kPaper.T_iss0_ns);
      }
      // Drain branch: one unit of gap removes one unit of issue stall.
      if (G + 37.0 < G_star) {
        EXPECT_NEAR(T - issue_time_ns(kPaper, V, G + 37.0), 37.0, 1e-6);
      }
      previous = T;
    }
  }
}

TEST(BurstGapProperties, ContinuousAtGStar) {
  const double G_star = recovery_gap_ns(kPaper, kPaperV);
  for (double eps : {1.0, 1e-3, 1e-6}) {
    EXPECT_NEAR(issue_time_ns(kPaper, kPaperV, G_star - eps), kPaper.T_iss0_ns, eps * 1.0001);
    EXPECT_DOUBLE_EQ(issue_time_ns(kPaper, kPaperV, G_star + eps), kPaper.T_iss0_ns);
    EXPECT_NEAR(period_ns(kPaper, kPaperV, G_star - eps), period_ns(kPaper, kPaperV, G_star + eps), 2 * eps * 1.0001);
  }
  EXPECT_NEAR(issue_overhead_ns(kPaper, kPaperV, G_star), 0.0, 1e-9);
}

TEST(BurstGapProperties, Limits) {
  // G -> 0: the drain sets the pace, T_iss = V/R (drain-dominated) = T_period.
  EXPECT_DOUBLE_EQ(issue_time_ns(kPaper, kPaperV, 0.0), kPaperV / 717.0);
  EXPECT_DOUBLE_EQ(period_ns(kPaper, kPaperV, 0.0), kPaperV / 717.0);
  // A tiny burst is never drain-limited.
  EXPECT_DOUBLE_EQ(issue_time_ns(kPaper, 1000.0, 0.0), kPaper.T_iss0_ns);
  // G -> infinity: recovered plateau, and the period grows one-for-one with G.
  EXPECT_DOUBLE_EQ(issue_time_ns(kPaper, kPaperV, 1e12), kPaper.T_iss0_ns);
  EXPECT_DOUBLE_EQ(period_ns(kPaper, kPaperV, 1e12), kPaper.T_iss0_ns + 1e12);
  EXPECT_DOUBLE_EQ(recovery_gap_ns(kPaper, 1000.0), 0.0);
  EXPECT_DOUBLE_EQ(peak_outstanding_bytes(kPaper, 1000.0), 0.0);
}

TEST(BurstGapProperties, MaxLawAgainstCompletionCoupledSum) {
  for (double G : {0.0, 1000.0, 6003.8, 20000.0}) {
    const double T = period_ns(kPaper, kPaperV, G);
    const double cc = period_completion_coupled_ns(kPaper, kPaperV, G);
    EXPECT_DOUBLE_EQ(T, issue_time_ns(kPaper, kPaperV, G) + G);                    // Eq. 2
    EXPECT_DOUBLE_EQ(T, std::max(kPaper.T_iss0_ns + G, kPaperV / 717.0));           // max law
    EXPECT_DOUBLE_EQ(cc, G + kPaperV / 717.0);
    if (G > 0.0) {
      EXPECT_LT(T, cc);  // the gap overlaps the drain instead of adding to it
    }
  }
  // On the drain plateau the max law is flat in G while the completion-coupled sum grows with it.
  EXPECT_DOUBLE_EQ(period_ns(kPaper, kPaperV, 1000.0), period_ns(kPaper, kPaperV, 2000.0));
}

TEST(BurstGapProperties, RateBoundHoldsExactlyWhenGapReachesGStar) {
  for (double V : {0.5 * MiB, kPaperV, 9.0 * MiB}) {
    const double G_star = recovery_gap_ns(kPaper, V);
    for (double G : {0.0, 0.5 * G_star, 0.999 * G_star, 1.001 * G_star, 4.0 * G_star + 1.0}) {
      const DesignTest t = design_test(kPaper, V, G);
      EXPECT_EQ(t.rate_bound_holds, G >= G_star) << "V=" << V << " G=" << G;
      EXPECT_EQ(t.rate_margin >= 0.0, t.rate_bound_holds);
      // Overhead comes from the drain branch (G < G*) or from overflowing Q (Eq. 6).
      EXPECT_EQ(t.dT_iss_ns > 0.0, G < G_star || !t.capacity_bound_holds);
      EXPECT_NEAR(t.V_max_rate_bytes, 717.0 * (760.0 + G), 1e-6);
    }
  }
}

TEST(BurstGapProperties, AlignedIssueTimeCombinesDrainAndCapacityBranches) {
  const double V = kPaperK * 40 * KiB;  // q_peak > Q
  const double Q_over_R = kPaper.Q_bytes / 717.0;
  // Short gaps: the drain branch dominates (G < Q/R); long gaps: the isolated-burst branch.
  EXPECT_DOUBLE_EQ(aligned_issue_time_ns(kPaper, V, 0.5 * Q_over_R), V / 717.0 - 0.5 * Q_over_R);
  EXPECT_DOUBLE_EQ(aligned_issue_time_ns(kPaper, V, 2.0 * Q_over_R), isolated_issue_time_ns(kPaper, V));
  EXPECT_NEAR(aligned_issue_time_ns(kPaper, V, Q_over_R), isolated_issue_time_ns(kPaper, V), 1e-6);
}

TEST(BurstGapInput, RejectsNonsense) {
  EXPECT_THROW(design_test(kPaper, 0.0, 100.0), InputError);
  EXPECT_THROW(design_test(kPaper, -5.0, 100.0), InputError);
  EXPECT_THROW(design_test(kPaper, kPaperV, -1.0), InputError);
  EXPECT_THROW(design_test(kPaper, std::nan(""), 1.0), InputError);
  EXPECT_THROW(design_test(PlatformPoint{760.0, 0.0, MiB}, kPaperV, 1.0), InputError);
  EXPECT_THROW(design_test(PlatformPoint{-1.0, 717.0, MiB}, kPaperV, 1.0), InputError);
  EXPECT_THROW(design_test(PlatformPoint{760.0, 717.0, 0.0}, kPaperV, 1.0), InputError);
}

}  // namespace
}  // namespace xstage::model
