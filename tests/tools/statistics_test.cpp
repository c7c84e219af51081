// The benchmarks' order statistics (tools/common/statistics.h) on values worked out by hand.
#include <doctest/doctest.h>

#include "tools/common/statistics.h"

using namespace zrt;

TEST_CASE("median: the middle value, or the mean of the middle two") {
  CHECK(median({3, 1, 2}) == 2.0);
  CHECK(median({4, 1, 3, 2}) == 2.5);
  CHECK(median({7}) == 7.0);
  CHECK(median({}) == 0.0);
}

TEST_CASE("quantile interpolates between neighbours of the sorted values") {
  const std::vector<double> v = {40, 10, 30, 20, 50};  // sorted: 10 20 30 40 50
  CHECK(quantile(v, 0.0) == 10.0);
  CHECK(quantile(v, 1.0) == 50.0);
  CHECK(quantile(v, 0.5) == 30.0);
  CHECK(quantile(v, 0.25) == 20.0);                      // at index 1
  CHECK(quantile(v, 0.1) == doctest::Approx(14.0));      // at 0.4: 10 + 0.4·10
  CHECK(quantile({1, 2}, 0.75) == doctest::Approx(1.75));
}
