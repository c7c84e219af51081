// Order statistics of repeated measurements for the benchmarks (zrt-comm-bench, zrt-optim-bench):
// a figure is reported as the median of its runs, a spread as quantiles, so one slow run (a noisy
// neighbour, a page fault) moves neither. Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace zrt {

// The q-quantile (q in 0..1) of v, interpolating linearly between neighbours; 0 for no values.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

// The middle value, or the mean of the two middle values for an even count; 0 for no values.
inline double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

}  // namespace zrt
