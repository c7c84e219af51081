// LatencyHistogram: a log-linear histogram of durations in nanoseconds (16 buckets per power
// of two, so a percentile is within about 6% of the true value), cheap enough to record every
// transfer. Percentiles for zrt-io's tables and the engine's stats.
// Thread-safety: none; the engine keeps one per ring and merges them.
#pragma once

#include <array>
#include <cstdint>

namespace zrt::offload {

class LatencyHistogram {
 public:
  void record(std::uint64_t nanos);
  void merge(const LatencyHistogram& other);
  void clear();

  std::uint64_t count() const { return count_; }
  std::uint64_t maxNanos() const { return max_; }
  double meanNanos() const { return count_ ? static_cast<double>(sum_) / count_ : 0.0; }
  // The value below which a fraction `q` (0..1) of the samples lie; 0 when empty.
  std::uint64_t percentileNanos(double q) const;

 private:
  static constexpr int kSubBits = 4;
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = (64 - kSubBits + 1) * kSub;
  static int bucketOf(std::uint64_t v);
  static std::uint64_t bucketLow(int b);
  static std::uint64_t bucketHigh(int b);

  std::array<std::uint64_t, kBuckets> buckets_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t max_ = 0;
};

}  // namespace zrt::offload
