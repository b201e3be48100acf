// The order in which compared variants take their turns, trial by trial (the CLI's benches; tools/common/timing.py
// has the same design for the Python tools).
//
// On a power-capped GPU a timing inherits the clock its predecessor left: a light predecessor leaves headroom, a heavy
// one takes it. Rotating one fixed order does not spread that: it keeps each variant's predecessor in (n-1)/n of its
// timings (on H200 the copy of a library listed after cuDNN SDPA, the slowest backend, ran up to 3.3% faster at
// Wan-14B than two copies of the same library listed after it: results/h200/attention/2026-12-02-turn-order/).
// The orders here are the rows of a Williams design, a Latin square balanced for first-order carryover: over one
// period of trials (turn_order_period: n for even n, 2n for odd n) every variant comes first once (twice) and
// follows every other variant equally often, once (twice).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace xstage {

// Trials after which the design repeats: every ordered pair of distinct variants adjacent equally often.
inline int turn_order_period(int n) { return n % 2 == 0 ? n : 2 * n; }

// Trial `trial`'s order of variants 0..n-1: row trial mod n of the square whose first row is 0, 1, n-1, 2, n-2, ...
// and whose row r adds r to every entry (mod n); for odd n, rows n..2n-1 are rows 0..n-1 reversed.
inline std::vector<int> turn_order(int n, int trial) {
  if (n < 1 || trial < 0)
    throw std::invalid_argument("turn_order: " + std::to_string(n) + " variants, trial " + std::to_string(trial) +
                                " (need n >= 1 and trial >= 0)");
  const int row = trial % turn_order_period(n), shift = row % n;
  std::vector<int> order(static_cast<std::size_t>(n));
  for (int i = 0, lo = 1, hi = n - 1; i < n; ++i) {
    const int base = i == 0 ? 0 : (i % 2 == 1 ? lo++ : hi--);
    order[static_cast<std::size_t>(i)] = (base + shift) % n;
  }
  if (row >= n) return {order.rbegin(), order.rend()};
  return order;
}

}  // namespace xstage
