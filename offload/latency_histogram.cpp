#include "offload/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace zrt::offload {

// Values below kSub get one bucket each; above, each power of two [2^e, 2^(e+1)) is split into
// kSub equal buckets by the kSubBits bits after the leading one.
int LatencyHistogram::bucketOf(std::uint64_t v) {
  if (v < static_cast<std::uint64_t>(kSub)) return static_cast<int>(v);
  const int e = 63 - std::countl_zero(v);
  const int sub = static_cast<int>((v >> (e - kSubBits)) & (kSub - 1));
  return (e - kSubBits + 1) * kSub + sub;
}

std::uint64_t LatencyHistogram::bucketLow(int b) {
  if (b < kSub) return static_cast<std::uint64_t>(b);
  const int e = b / kSub + kSubBits - 1;
  const std::uint64_t sub = static_cast<std::uint64_t>(b % kSub);
  return (1ull << e) + (sub << (e - kSubBits));
}

std::uint64_t LatencyHistogram::bucketHigh(int b) {
  if (b < kSub) return static_cast<std::uint64_t>(b);
  const int e = b / kSub + kSubBits - 1;
  return bucketLow(b) + ((1ull << (e - kSubBits)) - 1);
}

void LatencyHistogram::record(std::uint64_t nanos) {
  ++buckets_[bucketOf(nanos)];
  ++count_;
  sum_ += nanos;
  max_ = std::max(max_, nanos);
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  max_ = std::max(max_, other.max_);
}

void LatencyHistogram::clear() { *this = LatencyHistogram(); }

std::uint64_t LatencyHistogram::percentileNanos(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * count_)));
  if (rank >= count_) return max_;
  std::uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[b];
    if (seen >= rank) {
      // The bucket's midpoint, never above the largest sample.
      return std::min(max_, bucketLow(b) + (bucketHigh(b) - bucketLow(b)) / 2);
    }
  }
  return max_;
}

}  // namespace zrt::offload
