// The balanced turn order of the benches (common/turn_order.hpp): each trial a permutation, and over one period every
// variant first equally often and every ordered pair of distinct variants adjacent equally often.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/turn_order.hpp"

namespace xstage {
namespace {

TEST(TurnOrder, EveryPredecessorEquallyOftenOverOnePeriod) {
  for (int n = 1; n <= 9; ++n) {
    const int period = turn_order_period(n);
    std::vector<int> first(n, 0), follows(n * n, 0);
    for (int t = 0; t < period; ++t) {
      const std::vector<int> order = turn_order(n, t);
      std::vector<int> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n " << n << " trial " << t << ": not a permutation";
      ++first[order[0]];
      for (int i = 1; i < n; ++i) ++follows[order[i - 1] * n + order[i]];
      EXPECT_EQ(turn_order(n, t + period), order) << "n " << n << ": the design repeats after its period";
    }
    const int times = period / n;  // 1 for even n, 2 for odd n
    for (int v = 0; v < n; ++v) EXPECT_EQ(first[v], times) << "n " << n << ", variant " << v << " first";
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        EXPECT_EQ(follows[a * n + b], a == b ? 0 : times) << "n " << n << ": " << b << " after " << a;
  }
}

TEST(TurnOrder, TheRowsTheToolsUseToo) {
  // tools/common/timing.py's turn_order writes the same rows (tests/repo/tools_test.sh, case timing).
  const std::vector<std::vector<int>> four = {{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}};
  const std::vector<std::vector<int>> three = {{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}, {0, 2, 1}, {1, 0, 2}};
  for (int t = 0; t < 4; ++t) EXPECT_EQ(turn_order(4, t), four[t]);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(turn_order(3, t), three[t]);
}

TEST(TurnOrder, RefusesNoVariantsAndNegativeTrials) {
  EXPECT_THROW(turn_order(0, 0), std::invalid_argument);
  EXPECT_THROW(turn_order(3, -1), std::invalid_argument);
}

}  // namespace
}  // namespace xstage
