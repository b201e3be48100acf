#include "calibration/sweep_plan.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "common/error.hpp"

namespace xstage::calibration {

namespace {
constexpr std::int64_t KiB = 1024;
// Must match the kernels (src/calibration/store_bench.hpp): st.global producers are 256 threads of
// 16-byte stores; TMA bursts come from shared memory.
constexpr std::int64_t kStGlobalQuantum = 16 * 256;
constexpr std::int64_t kTmaQuantum = 16;
constexpr std::int64_t kMaxStGlobalB = 1024 * KiB;
constexpr std::int64_t kMaxTmaB = 128 * KiB;

int clamp_K(double k, int sm_count) { return std::clamp(static_cast<int>(std::lround(k)), 1, sm_count); }
}  // namespace

SweepGrid default_grid(int sm_count, StorePath path, bool quick) {
  XSTAGE_REQUIRE(sm_count >= 8, "the GPU reports " + std::to_string(sm_count) + " SMs; calibration needs at least 8");
  SweepGrid g;
  std::set<int> fit = {clamp_K(sm_count / 8.0, sm_count), clamp_K(sm_count / 4.0, sm_count),
                       clamp_K(sm_count / 2.0, sm_count), sm_count};
  if (quick) fit = {clamp_K(sm_count / 4.0, sm_count), sm_count};
  g.K_fit.assign(fit.begin(), fit.end());
  for (double f : {0.18, 0.75}) {
    int k = clamp_K(f * sm_count, sm_count);
    while (fit.count(k)) ++k;  // held-out K must never be a fit K
    if (k <= sm_count) g.K_heldout.push_back(k);
  }
  if (quick) g.K_heldout.resize(1);
  const std::int64_t max_B = path == StorePath::tma_bulk ? kMaxTmaB : 256 * KiB;
  for (std::int64_t b = 4 * KiB; b <= max_B; b *= 2) {
    g.B_bytes.push_back(b);
    if (!quick && b >= 16 * KiB && b * 3 / 2 <= max_B) g.B_bytes.push_back(b * 3 / 2);  // finer near the knee
  }
  if (quick) g.B_bytes = {8 * KiB, 32 * KiB, 64 * KiB, path == StorePath::tma_bulk ? kMaxTmaB : 256 * KiB};
  std::sort(g.B_bytes.begin(), g.B_bytes.end());
  g.gap_points = quick ? 8 : 16;
  g.isolated_bursts = quick ? 12 : 24;
  return g;
}

void validate_grid(const SweepGrid& grid, int sm_count, StorePath path) {
  auto check_K = [&](const std::vector<int>& ks, const char* what) {
    XSTAGE_REQUIRE(!ks.empty(), std::string(what) + " is empty");
    for (int k : ks)
      XSTAGE_REQUIRE(k >= 1 && k <= sm_count, std::string(what) + ": K=" + std::to_string(k) +
                                                  " is not in 1.." + std::to_string(sm_count) +
                                                  " (one producer CTA per SM)");
  };
  check_K(grid.K_fit, "fit K list");
  check_K(grid.K_heldout, "held-out K list");
  for (int k : grid.K_heldout)
    XSTAGE_REQUIRE(std::find(grid.K_fit.begin(), grid.K_fit.end(), k) == grid.K_fit.end(),
                   "held-out K=" + std::to_string(k) + " is also a fit K; held-out K must be unseen by the fit");
  const std::int64_t quantum = path == StorePath::tma_bulk ? kTmaQuantum : kStGlobalQuantum;
  const std::int64_t max_B = path == StorePath::tma_bulk ? kMaxTmaB : kMaxStGlobalB;
  auto check_B = [&](std::int64_t b) {
    XSTAGE_REQUIRE(b >= quantum && b % quantum == 0 && b <= max_B,
                   "B=" + std::to_string(b) + " bytes is invalid for " + model::to_string(path) +
                       ": use a multiple of " + std::to_string(quantum) + " bytes up to " + std::to_string(max_B));
  };
  XSTAGE_REQUIRE(!grid.B_bytes.empty(), "B list is empty");
  for (auto b : grid.B_bytes) check_B(b);
  check_B(grid.gap_sweep_B_bytes);
  XSTAGE_REQUIRE(grid.gap_points >= 4 && grid.gap_points <= 64, "gap points must be in 4..64");
}

std::vector<double> gap_sweep_ns(std::int64_t V_bytes, double R_bytes_per_ns, int points) {
  XSTAGE_REQUIRE(R_bytes_per_ns > 0 && points >= 2, "gap sweep needs R > 0 and at least 2 points");
  const double span = 3.0 * static_cast<double>(V_bytes) / R_bytes_per_ns;
  std::vector<double> g;
  for (int i = 0; i < points; ++i) g.push_back(span * i / (points - 1));
  return g;
}

double plateau_gap_ns(std::int64_t V_bytes, double R_bytes_per_ns) {
  return 2.0 * static_cast<double>(V_bytes) / R_bytes_per_ns + 2000.0;
}

double periodic_duration_ns(double period_ns) { return std::max(500'000.0, 32.0 * period_ns); }

double rough_R_bytes_per_ns(const std::vector<BurstSample>& zero_gap_remote) {
  std::vector<const BurstSample*> pts;
  for (const auto& s : zero_gap_remote)
    if (s.T_period_ns > 0) pts.push_back(&s);
  if (pts.empty())
    throw Error("the zero-gap sweep produced no periods; cannot estimate the drain rate R");
  std::sort(pts.begin(), pts.end(), [](auto* a, auto* b) { return a->V_bytes() < b->V_bytes(); });
  std::vector<double> rates;
  for (std::size_t i = pts.size() * 2 / 3; i < pts.size(); ++i)
    rates.push_back(static_cast<double>(pts[i]->V_bytes()) / pts[i]->T_period_ns);
  std::nth_element(rates.begin(), rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2), rates.end());
  return rates[rates.size() / 2];
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    XSTAGE_REQUIRE(used == item.size() && !item.empty(), what + ": '" + item + "' is not an integer");
    out.push_back(v);
  }
  XSTAGE_REQUIRE(!out.empty(), what + " is empty");
  return out;
}

}  // namespace xstage::calibration
