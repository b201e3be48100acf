// The fluid X-Stage simulator against the closed forms, and what staggering and jitter do.
#include <gtest/gtest.h>

#include <chrono>

#include "common/error.hpp"
#include "model/burst_gap.hpp"
#include "model/simulator.hpp"
#include "model/units.hpp"

namespace xstage::model {
namespace {

constexpr PlatformPoint kPaper{760.0, 717.0, 4.25 * MiB};

SimulationConfig aligned(int K, double B, double G, int bursts = 60) {
  SimulationConfig c;
  c.platform = kPaper;
  c.K = K;
  c.B_bytes = B;
  c.G_ns = G;
  c.bursts = bursts;
  return c;
}

void expect_within(double simulated, double predicted, double tolerance, const char* what) {
  EXPECT_NEAR(simulated / predicted, 1.0, tolerance) << what << ": simulated " << simulated << " predicted "
                                                      << predicted;
}

// Aligned producers in steady state: the simulator must agree with Eq. 3 / the max law within 2%.
struct Regime {
  const char* name;
  int K;
  double B;
  double G;
};

class AlignedSteadyState : public ::testing::TestWithParam<Regime> {};

TEST_P(AlignedSteadyState, AgreesWithClosedFormWithinTwoPercent) {
  const Regime r = GetParam();
  const SimulationResult s = simulate(aligned(r.K, r.B, r.G));
  const double V = r.K * r.B;
  expect_within(s.T_iss_ns.median, aligned_issue_time_ns(kPaper, V, r.G), 0.02, "T_iss");
  expect_within(s.T_period_ns.median, aligned_issue_time_ns(kPaper, V, r.G) + r.G, 0.02, "T_period");
  // Aligned producers are identical: the distribution is a point.
  EXPECT_NEAR(s.T_iss_ns.p90 / s.T_iss_ns.p10, 1.0, 1e-6);
  EXPECT_EQ(s.T_iss_ns.count, static_cast<std::size_t>(r.K * 30));
}

INSTANTIATE_TEST_SUITE_P(
    Regimes, AlignedSteadyState,
    ::testing::Values(
        // Drain-dominated: G < G* ≈ 6.0 us, T_iss = V/R − G.
        Regime{"drain_zero_gap", 148, 32 * KiB, 0.0}, Regime{"drain_short_gap", 148, 32 * KiB, 2000.0},
        Regime{"drain_near_gstar", 148, 32 * KiB, 5500.0},
        // Recovered: G ≥ G*, T_iss = T_iss0.
        Regime{"recovered", 148, 32 * KiB, 7000.0}, Regime{"recovered_small_K", 16, 64 * KiB, 500.0},
        // Capacity-limited: q_peak > Q; with G > Q/R each burst starts empty and takes T_iso (Eq. 6).
        Regime{"capacity_periodic", 148, 40 * KiB, 12000.0}),
    [](const ::testing::TestParamInfo<Regime>& info) { return std::string(info.param.name); });

TEST(Simulator, IsolatedBurstMatchesEq6) {
  for (double B : {16 * KiB, 32 * KiB, 40 * KiB, 64 * KiB}) {
    SimulationConfig c = aligned(148, B, 0.0, 1);
    const SimulationResult s = simulate(c);
    ASSERT_EQ(s.T_iss_ns.count, 148u);
    expect_within(s.T_iss_ns.median, isolated_issue_time_ns(kPaper, 148 * B), 0.02, "T_iso");
    EXPECT_EQ(s.T_period_ns.count, 0u);  // one burst has no period
    // The outstanding volume peaks at min(q_peak, Q).
    EXPECT_NEAR(s.max_outstanding_bytes, std::min(peak_outstanding_bytes(kPaper, 148 * B), kPaper.Q_bytes),
                1e-6 * kPaper.Q_bytes);
  }
}

TEST(Simulator, MaxLawNotCompletionCoupled) {
  // Sweep G across G*: the simulated period follows max(T_iss0 + G, V/R), far from G + V/R.
  const double V = 148 * 32 * KiB;
  for (double G : {1000.0, 3000.0, 6000.0, 9000.0}) {
    const SimulationResult s = simulate(aligned(148, 32 * KiB, G));
    expect_within(s.T_period_ns.median, period_ns(kPaper, V, G), 0.02, "T_period");
    EXPECT_LT(s.T_period_ns.median, 0.98 * period_completion_coupled_ns(kPaper, V, G));
  }
}

TEST(Simulator, StaggeringRemovesTheAlignedCapacityOverflow) {
  // 40 KiB per producer at K = 148 overflows Q when aligned (T_iso ≈ 2.24 us). Spread the producers'
  // phases over one period and the injection is smooth: every burst issues at about T_iss0.
  const double G = 20000.0;
  SimulationConfig c = aligned(148, 40 * KiB, G);
  const SimulationResult al = simulate(c);
  expect_within(al.T_iss_ns.median, isolated_issue_time_ns(kPaper, 148 * 40 * KiB), 0.02, "aligned");
  c.stagger_ns = kPaper.T_iss0_ns + G;
  const SimulationResult st = simulate(c);
  expect_within(st.T_iss_ns.median, kPaper.T_iss0_ns, 0.02, "staggered");
  EXPECT_LT(st.max_outstanding_bytes, kPaper.Q_bytes);
  EXPECT_DOUBLE_EQ(st.throttled_fraction, 0.0);
}

TEST(Simulator, StaggeringCannotBeatTheDrainRate) {
  // Drain-dominated: whatever the phases, flow conservation keeps the mean period at V/R.
  const double V = 148 * 32 * KiB;
  SimulationConfig c = aligned(148, 32 * KiB, 1000.0, 80);
  c.stagger_ns = 5000.0;
  c.jitter_ns = 300.0;
  const SimulationResult s = simulate(c);
  expect_within(s.T_period_ns.mean, V / kPaper.R_bytes_per_ns, 0.02, "staggered period");
  EXPECT_GT(s.throttled_fraction, 0.5);
}

TEST(Simulator, JitterIsSeededAndDeterministic) {
  SimulationConfig c = aligned(64, 32 * KiB, 3000.0, 40);
  c.jitter_ns = 800.0;
  c.seed = 7;
  const SimulationResult a = simulate(c), b = simulate(c);
  EXPECT_DOUBLE_EQ(a.T_iss_ns.median, b.T_iss_ns.median);
  EXPECT_DOUBLE_EQ(a.T_period_ns.p90, b.T_period_ns.p90);
  EXPECT_EQ(a.events, b.events);
  c.seed = 8;
  const SimulationResult d = simulate(c);
  EXPECT_NE(a.T_period_ns.p90, d.T_period_ns.p90);
  // Jitter spreads the periods: p10 < p90.
  EXPECT_LT(a.T_period_ns.p10, a.T_period_ns.p90);
}

TEST(Simulator, FastEnoughForTheCli) {
  SimulationConfig c = aligned(132, 32 * KiB, 2000.0, 100);
  c.stagger_ns = 3000.0;
  c.jitter_ns = 500.0;
  const auto t0 = std::chrono::steady_clock::now();
  const SimulationResult s = simulate(c);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(s.T_iss_ns.count, 132u * 50u);
}

TEST(Simulator, Summarize) {
  const Distribution d = summarize({5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0});
  EXPECT_EQ(d.count, 11u);
  EXPECT_DOUBLE_EQ(d.median, 6.0);
  EXPECT_DOUBLE_EQ(d.p10, 2.0);
  EXPECT_DOUBLE_EQ(d.p90, 10.0);
  EXPECT_DOUBLE_EQ(d.mean, 6.0);
  EXPECT_DOUBLE_EQ(d.min, 1.0);
  EXPECT_DOUBLE_EQ(d.max, 11.0);
  EXPECT_DOUBLE_EQ(summarize({1.0, 2.0}).median, 1.5);
  EXPECT_EQ(summarize({}).count, 0u);
}

TEST(Simulator, RejectsBadConfigurations) {
  SimulationConfig c = aligned(0, 32 * KiB, 0.0);
  EXPECT_THROW(simulate(c), InputError);
  c = aligned(4, -1.0, 0.0);
  EXPECT_THROW(simulate(c), InputError);
  c = aligned(4, 32 * KiB, -5.0);
  EXPECT_THROW(simulate(c), InputError);
  c = aligned(4, 32 * KiB, 0.0, 10);
  c.warmup_bursts = 10;
  EXPECT_THROW(simulate(c), InputError);
  c = aligned(4, 32 * KiB, 0.0);
  c.jitter_ns = -1.0;
  EXPECT_THROW(simulate(c), InputError);
  c = aligned(4, 32 * KiB, 0.0);
  c.platform.R_bytes_per_ns = 0.0;
  EXPECT_THROW(simulate(c), InputError);
}

}  // namespace
}  // namespace xstage::model
