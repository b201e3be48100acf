// The last check before a result is shown (common/result_check.hpp): what it lets through and what it stops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.hpp"
#include "common/result_check.hpp"

namespace {

using nlohmann::json;

// Expects require_sane_result to throw xstage::Error naming `field` and saying "internal error".
void expect_stopped(const json& doc, const std::string& field) {
  try {
    xstage::require_sane_result(doc);
    FAIL() << "let through: " << doc.dump();
  } catch (const xstage::InputError& e) {
    FAIL() << "a bad result is a program error, not bad input: " << e.what();
  } catch (const xstage::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("internal error"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
  }
}

TEST(ResultCheck, FiniteNonNegativeResultsAndSignedMarginsPass) {
  const json ok = {{"G_star_ns", 5270.0},
                   {"gap_margin_ns", -3270.0},  // G < G*: broken by that much
                   {"rate_bound", {{"margin", -0.4}}},
                   {"capacity_bound", {{"margin_bytes", -2.5e6}}},
                   {"tiles", 0},
                   {"seed", 18446744073709551ull / 1000},
                   {"D_knee_rows", nullptr},
                   {"verdict", "reshape"},
                   {"warnings", json::array({"w"})}};
  EXPECT_NO_THROW(xstage::require_sane_result(ok));
}

TEST(ResultCheck, NonFiniteNegativeAndWrappedValuesAreInternalErrors) {
  const double inf = std::numeric_limits<double>::infinity();
  expect_stopped({{"G_star_ns", inf}}, "/G_star_ns");
  expect_stopped({{"platform", {{"T_iss0_ns", std::nan("")}}}}, "/platform/T_iss0_ns");
  expect_stopped({{"schedules", json::array({{{"stall_ns", -1.0}}})}}, "/schedules/0/stall_ns");
  expect_stopped({{"M_ub_tokens", -4116683156392951808LL}}, "/M_ub_tokens");          // an int64 that wrapped
  expect_stopped({{"tiles", 18446744073709551615ull}}, "/tiles");                      // a size_t that wrapped
  expect_stopped({{"rate_bound", {{"margin", inf}}}}, "/rate_bound/margin");            // signed, but still finite
  expect_stopped(json::array({1.0, -2.0}), "/1");
}

}  // namespace
