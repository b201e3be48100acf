#include "common/result_check.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "common/json_file.hpp"

namespace xstage {

namespace {

// Margins are signed by definition (< 0: the bound is broken by that much); every other quantity is a time,
// a size, a rate, a count or a fraction.
bool signed_field(const std::string& key) { return key.find("margin") != std::string::npos; }

void check(const nlohmann::json& v, const std::string& at, bool may_be_negative) {
  if (v.is_object()) {
    for (const auto& [key, child] : v.items()) check(child, json_pointer(at, key), signed_field(key));
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) check(v[i], json_pointer(at, i), may_be_negative);
  } else if (v.is_number_float()) {
    const double x = v.get<double>();
    if (!std::isfinite(x)) throw Error("internal error: the result's " + at + " is " + std::to_string(x) + " (not printed)");
    if (x < 0.0 && !may_be_negative)
      throw Error("internal error: the result's " + at + " is negative (" + std::to_string(x) + "; not printed)");
  } else if (v.is_number_unsigned()) {
    // No count, size or seed reaches 2^63: one that does wrapped around below zero.
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      throw Error("internal error: the result's " + at + " is " + v.dump() + " (an overflowed count, not printed)");
  } else if (v.is_number_integer()) {
    if (v.get<std::int64_t>() < 0 && !may_be_negative)
      throw Error("internal error: the result's " + at + " is negative (" + v.dump() + "; an overflowed count, not printed)");
  }
}

}  // namespace

void require_sane_result(const nlohmann::json& result) { check(result, "", false); }

}  // namespace xstage
