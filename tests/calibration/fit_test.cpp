// The fit must recover a known triple from noisy synthetic sweeps, predict held-out gap sweeps, and
// refuse data that cannot support a fit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "calibration/fit.hpp"
#include "calibration/measurement.hpp"
#include "model/platform.hpp"
#include "model/burst_gap.hpp"
#include "common/error.hpp"
#include "synthetic.hpp"

namespace xstage::calibration {
namespace {

using testing::kMiB;
using testing::make_synthetic_samples;
using testing::SweepPlan;
using testing::Truth;

const std::vector<int> kHeldOut = {24, 99};

bool has_warning(const FitReport& r, const std::string& text) {
  for (const auto& w : r.warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

double median_abs_rel_err(const std::vector<double>& pred, const std::vector<double>& meas) {
  std::vector<double> e;
  for (std::size_t i = 0; i < pred.size(); ++i) e.push_back(std::abs(pred[i] / meas[i] - 1.0));
  std::sort(e.begin(), e.end());
  return e[e.size() / 2];
}

TEST(FitPlatformTriple, RecoversTheTruthFromNoisySweeps) {
  const Truth truth;
  const auto samples = make_synthetic_samples(truth, SweepPlan{});
  const FitReport r = fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut);
  const auto& t = r.triple;

  EXPECT_NEAR(t.R_bytes_per_ns / truth.R_bytes_per_ns, 1.0, 0.03);
  ASSERT_EQ(t.fit["R"]["per_rank"].size(), 2u);
  for (const auto& pr : t.fit["R"]["per_rank"])
    EXPECT_NEAR(pr["R_bytes_per_ns"].get<double>() / truth.R_bytes_per_ns, 1.0, 0.03);
  // The wall-clock rate is 2% below V/T_period in the synthetic launch; the fit must see R/wall ≈ 1.02.
  EXPECT_NEAR(r.R_over_wall_median, 1.0 / truth.wall_efficiency, 0.02);

  ASSERT_EQ(t.T_iss0.size(), 4u * 7u);  // one point per (K, B) of the plateau grid, held-out K absent
  for (const auto& p : t.T_iss0) {
    EXPECT_NEAR(p.T_iss0_ns / truth.T_iss0_ns(p.K, p.B_bytes), 1.0, 0.05) << "K=" << p.K << " B=" << p.B_bytes;
    EXPECT_NE(p.K, 24);
    EXPECT_NE(p.K, 99);
  }

  // With T_iss0 = 150 ns + B/(20 B/ns), K=16 and K=33 issue slower than the drain empties Q: no knee.
  ASSERT_EQ(t.Q.size(), 2u);
  for (const auto& q : t.Q) {
    EXPECT_TRUE(q.K == 66 || q.K == 132);
    EXPECT_NEAR(q.Q_bytes / truth.Q_bytes(q.K), 1.0, 0.10) << "K=" << q.K;
  }
  EXPECT_TRUE(has_warning(r, "no knee for K=16 below V=4.00 MiB"));
  EXPECT_TRUE(has_warning(r, "no knee for K=33"));

  // Held-out K are predicted with no refit; the max law beats the completion-coupled sum by far.
  EXPECT_LT(r.period_err_heldout_median, 0.05);
  EXPECT_LT(r.issue_err_heldout_median, 0.08);
  EXPECT_LT(r.period_err_fit_median, 0.05);
  EXPECT_LT(r.issue_err_fit_median, 0.08);
  EXPECT_GT(r.period_err_completion_coupled_median, 3.0 * r.period_err_heldout_median);
  EXPECT_GT(r.period_err_completion_coupled_median, 0.10);

  // Local control: only ±3% noise, so max/min − 1 ≤ 1.03/0.97 − 1.
  EXPECT_LT(r.local_control_flatness, 1.03 / 0.97 - 1.0 + 1e-9);
  EXPECT_EQ(t.fit["validation"]["n_heldout"].get<int>(), 2 * 2 * 16);
  EXPECT_DOUBLE_EQ(t.fit["validation"]["period_err_heldout_median"].get<double>(), r.period_err_heldout_median);
}

TEST(FitPlatformTriple, NoiselessDataIsRecoveredExactly) {
  const Truth truth;
  SweepPlan plan;
  plan.noise = 0.0;
  const FitReport r = fit_platform_triple(make_synthetic_samples(truth, plan), StorePath::st_global_16B, kHeldOut);
  EXPECT_NEAR(r.triple.R_bytes_per_ns, truth.R_bytes_per_ns, 1e-6);
  for (const auto& q : r.triple.Q) EXPECT_NEAR(q.Q_bytes, truth.Q_bytes(q.K), 1.0);
  EXPECT_LT(r.period_err_heldout_median, 1e-9);
  EXPECT_LT(r.issue_err_heldout_median, 1e-9);
  EXPECT_LT(r.local_control_flatness, 1e-12);
  EXPECT_TRUE(r.warnings.size() == 2u) << r.triple.fit["warnings"].dump();  // the two "no knee" lines
}

// Real queues round the corner of the max law; the drain and branch thresholds keep the corner
// points out of R and Q, so a soft corner (p = 6) costs little.
TEST(FitPlatformTriple, RoundedCornerStillRecoversTheTriple) {
  Truth truth;
  truth.corner_p = 6.0;
  const FitReport r = fit_platform_triple(make_synthetic_samples(truth, SweepPlan{}), StorePath::st_global_16B, kHeldOut);
  EXPECT_NEAR(r.triple.R_bytes_per_ns / truth.R_bytes_per_ns, 1.0, 0.03);
  ASSERT_EQ(r.triple.Q.size(), 2u);
  for (const auto& q : r.triple.Q) EXPECT_NEAR(q.Q_bytes / truth.Q_bytes(q.K), 1.0, 0.10) << "K=" << q.K;
  EXPECT_LT(r.period_err_heldout_median, 0.10);
  EXPECT_LT(r.issue_err_heldout_median, 0.15);
}

// One wild drain point (a clock dip halving one period) must not move R: the reason for the median.
TEST(FitPlatformTriple, OneOutlierDoesNotMoveR) {
  const Truth truth;
  auto samples = make_synthetic_samples(truth, SweepPlan{});
  for (auto& s : samples)
    if (s.sweep == Sweep::zero_gap && s.dest == Destination::remote && s.K == 132 && s.B_bytes == 256 * 1024)
      s.T_period_ns *= 0.5;
  const FitReport r = fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut);
  EXPECT_NEAR(r.triple.R_bytes_per_ns / truth.R_bytes_per_ns, 1.0, 0.03);
}

TEST(FitPlatformTriple, FitsEachStorePathFromItsOwnSamples) {
  Truth st, tma;
  tma.R_bytes_per_ns = 450.0;
  tma.T_fixed_ns = 400.0;
  SweepPlan st_plan, tma_plan;
  tma_plan.path = StorePath::tma_bulk;
  tma_plan.seed = 7;
  auto samples = make_synthetic_samples(st, st_plan);
  const auto tma_samples = make_synthetic_samples(tma, tma_plan);
  samples.insert(samples.end(), tma_samples.begin(), tma_samples.end());

  const FitReport rs = fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut);
  const FitReport rt = fit_platform_triple(samples, StorePath::tma_bulk, kHeldOut);
  EXPECT_NEAR(rs.triple.R_bytes_per_ns / st.R_bytes_per_ns, 1.0, 0.03);
  EXPECT_NEAR(rt.triple.R_bytes_per_ns / tma.R_bytes_per_ns, 1.0, 0.03);
  EXPECT_EQ(rt.triple.T_iss0.size(), 4u * 6u);  // TMA grid stops at 128 KiB
  for (const auto& p : rt.triple.T_iss0) EXPECT_NEAR(p.T_iss0_ns / tma.T_iss0_ns(p.K, p.B_bytes), 1.0, 0.05);
  EXPECT_LT(rt.period_err_heldout_median, 0.05);
}

// The predictions must expose a wrong triple: with R scaled by 1.25 the back-pressured gap points
// (G < G*, where R matters at all) are off by ~20%, against a few percent with the fitted R.
TEST(FitPlatformTriple, PredictionsExposeACorruptedR) {
  const Truth truth;
  const auto samples = make_synthetic_samples(truth, SweepPlan{});
  auto triple = fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut).triple;
  auto period_err = [&](const model::PlatformTriple& t) {
    std::vector<double> pred, meas;
    for (const auto& s : samples) {
      const double G_star = s.V_bytes() / truth.R_bytes_per_ns - truth.T_iss0_ns(s.K, s.B_bytes);
      if (s.sweep != Sweep::gap || s.dest != Destination::remote || s.gap_ns_requested >= G_star) continue;
      model::PlatformPoint p;
      p.T_iss0_ns = model::interpolate_T_iss0_ns(t, s.K, static_cast<double>(s.B_bytes)).value;
      p.R_bytes_per_ns = t.R_bytes_per_ns;
      pred.push_back(model::period_ns(p, static_cast<double>(s.V_bytes()), s.gap_ns));
      meas.push_back(s.T_period_ns);
    }
    return median_abs_rel_err(pred, meas);
  };
  EXPECT_LT(period_err(triple), 0.04);
  triple.R_bytes_per_ns *= 1.25;
  EXPECT_GT(period_err(triple), 0.15);
}

TEST(FitPlatformTriple, NoDrainDominatedPointIsAnInputErrorThatSaysWhatToDo) {
  Truth fast_drain;
  fast_drain.R_bytes_per_ns = 1e6;  // V/R is negligible next to the issue time everywhere
  const auto samples = make_synthetic_samples(fast_drain, SweepPlan{});
  try {
    fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("st_global_16B"), std::string::npos) << what;
    EXPECT_NE(what.find("drain-dominated"), std::string::npos) << what;
    EXPECT_NE(what.find("larger B or more producers K"), std::string::npos) << what;
  }
}

TEST(FitPlatformTriple, RejectsUntaggedSamplesAndMissingSweeps) {
  auto samples = make_synthetic_samples(Truth{}, SweepPlan{});
  samples[3].sweep = Sweep::unset;
  EXPECT_THROW(fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut), InputError);

  EXPECT_THROW(fit_platform_triple(samples, StorePath::tma_bulk, kHeldOut), InputError);  // no such samples

  auto no_plateau = make_synthetic_samples(Truth{}, SweepPlan{});
  std::erase_if(no_plateau, [](const BurstSample& s) { return s.sweep == Sweep::plateau; });
  try {
    fit_platform_triple(no_plateau, StorePath::st_global_16B, kHeldOut);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("plateau"), std::string::npos) << e.what();
  }
}

TEST(FitPlatformTriple, FlagsAPlateauGapShorterThanTheRecoveryGap) {
  auto samples = make_synthetic_samples(Truth{}, SweepPlan{});
  for (auto& s : samples)
    if (s.sweep == Sweep::plateau && s.K == 132 && s.B_bytes == 256 * 1024) s.gap_ns = 1000.0;
  const FitReport r = fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut);
  EXPECT_TRUE(has_warning(r, "2 plateau samples have a gap shorter than the recovery gap")) << r.triple.fit["warnings"];
}

TEST(FitPlatformTriple, FlagsALocalControlThatDependsOnTheGap) {
  auto samples = make_synthetic_samples(Truth{}, SweepPlan{});
  for (auto& s : samples)  // a store loop that gets 40% slower as the gap grows: not remote back-pressure
    if (s.sweep == Sweep::gap && s.dest == Destination::local) s.T_iss_ns *= 1.0 + 0.4 * s.gap_ns / 20000.0;
  const FitReport r = fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut);
  EXPECT_GT(r.local_control_flatness, 0.2);
  EXPECT_TRUE(has_warning(r, "local control varies"));
}

TEST(FitPlatformTriple, GapSweepPointsNeverEnterTheFit) {
  const auto samples = make_synthetic_samples(Truth{}, SweepPlan{});
  auto tampered = samples;
  for (auto& s : tampered)  // wreck every gap-sweep sample; the triple must not move
    if (s.sweep == Sweep::gap) { s.T_iss_ns *= 3.0; s.T_period_ns *= 3.0; }
  const auto a = fit_platform_triple(samples, StorePath::st_global_16B, kHeldOut).triple;
  const auto b = fit_platform_triple(tampered, StorePath::st_global_16B, kHeldOut).triple;
  EXPECT_EQ(a.R_bytes_per_ns, b.R_bytes_per_ns);
  ASSERT_EQ(a.Q.size(), b.Q.size());
  for (std::size_t i = 0; i < a.Q.size(); ++i) EXPECT_EQ(a.Q[i].Q_bytes, b.Q[i].Q_bytes);
}

// What the fit returns must be a valid platform file for `xstage plan` and survive a round trip.
TEST(FitPlatformTriple, OutputIsAValidPlatformFile) {
  model::PlatformModel platform;
  platform.store_paths[StorePath::st_global_16B] =
      fit_platform_triple(make_synthetic_samples(Truth{}, SweepPlan{}), StorePath::st_global_16B, kHeldOut).triple;
  EXPECT_NO_THROW(model::validate_platform(platform, "fit output"));
  const std::string path = ::testing::TempDir() + "xstage_fit_platform.json";
  model::write_platform_file(path, platform);
  const auto back = model::read_platform_file(path);
  const auto& a = platform.store_paths.at(StorePath::st_global_16B);
  const auto& b = back.store_paths.at(StorePath::st_global_16B);
  EXPECT_DOUBLE_EQ(a.R_bytes_per_ns, b.R_bytes_per_ns);
  EXPECT_EQ(a.T_iss0.size(), b.T_iss0.size());
  EXPECT_EQ(a.Q.size(), b.Q.size());
  EXPECT_EQ(b.fit["held_out_K"], nlohmann::json({24, 99}));
  std::remove(path.c_str());
}

// Interpolation and the closed forms themselves are tested with the model (tests/model).

// The artefacts a calibration leaves (samples.csv + platform.json, both store paths) from synthetic truths,
// written and read back: the fit recovers each path's drain rate from its own samples, and the files
// round-trip. Written to XSTAGE_SYNTHETIC_OUT when set (inputs for tools/calibration/plot.py), else to a
// temporary folder that is removed.
TEST(SyntheticArtefacts, WriteReadBackAndFitEachPath) {
  const char* keep = std::getenv("XSTAGE_SYNTHETIC_OUT");
  const std::string dir = keep ? std::string(keep) : ::testing::TempDir();
  Truth st, tma;
  tma.R_bytes_per_ns = 450.0;
  tma.T_fixed_ns = 400.0;
  SweepPlan tma_plan;
  tma_plan.path = StorePath::tma_bulk;
  auto samples = make_synthetic_samples(st, SweepPlan{});
  const auto more = make_synthetic_samples(tma, tma_plan);
  samples.insert(samples.end(), more.begin(), more.end());
  const std::string samples_path = dir + "/samples.csv", platform_path = dir + "/platform.json";
  write_samples_csv(samples_path, samples);
  EXPECT_EQ(read_samples_csv(samples_path).size(), samples.size());

  model::PlatformModel platform;
  platform.provisional = true;
  platform.provenance = {{"note", "synthetic (tests/calibration/fit_test.cpp)"}};
  for (StorePath p : {StorePath::st_global_16B, StorePath::tma_bulk})
    platform.store_paths[p] = fit_platform_triple(samples, p, kHeldOut).triple;
  model::write_platform_file(platform_path, platform);
  const model::PlatformModel back = model::read_platform_file(platform_path);
  ASSERT_EQ(back.store_paths.size(), 2u);
  EXPECT_NEAR(back.store_paths.at(StorePath::st_global_16B).R_bytes_per_ns, st.R_bytes_per_ns, 0.05 * st.R_bytes_per_ns);
  EXPECT_NEAR(back.store_paths.at(StorePath::tma_bulk).R_bytes_per_ns, tma.R_bytes_per_ns, 0.05 * tma.R_bytes_per_ns);
  if (!keep) {
    std::remove(samples_path.c_str());
    std::remove(platform_path.c_str());
  }
}

}  // namespace
}  // namespace xstage::calibration
