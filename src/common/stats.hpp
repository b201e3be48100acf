// The order statistics every result in xstage is reported with (one implementation).
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace xstage {

// Median (mean of the two middle values for an even count); NaN for no values.
inline double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2) return upper;
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)));
}

// The value at rank floor(q·(n−1)) of the sorted values (q in [0, 1]); NaN for no values.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const auto k = static_cast<std::ptrdiff_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[static_cast<std::size_t>(k)];
}

// The median over trials of a[i] / b[i], trial by trial (two variants timed in turn); NaN for no values.
inline double median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r(std::min(a.size(), b.size()));
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = a[i] / b[i];
  return median(r);
}

}  // namespace xstage
