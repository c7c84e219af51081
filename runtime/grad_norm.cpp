#include "runtime/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace zrt {
namespace {

// The squares go into independent partial sums: one running sum is a chain of dependent adds and
// took 1% of a 4 x 256 GPT-2's step, as much as AdamW's pass. No element needs its own inf/NaN
// test either: a finite float's square is below 1.2e77, so a sum of them stays finite in double,
// and the sum is inf or NaN exactly when some element is.
template <class Load>
NormPart normPartOf(std::size_t count, Load load) {
  constexpr std::size_t kLanes = 8;
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) {
      const double v = load(i + k);
      lane[k] += v * v;
    }
  for (; i < count; ++i) {
    const double v = load(i);
    lane[0] += v * v;
  }
  NormPart p;
  for (const double l : lane) p.sumSq += l;
  p.nonFinite = std::isfinite(p.sumSq) ? 0 : 1;
  return p;
}

NormPart normPartSerial(DType t, const void* base, std::size_t count) {
  const auto* h = static_cast<const std::uint16_t*>(base);
  switch (t) {
    case DType::F32: return normPartOf(count, [&](std::size_t i) { return static_cast<const float*>(base)[i]; });
    case DType::F16: return normPartOf(count, [&](std::size_t i) { return halfToFloat(h[i]); });
    case DType::BF16: return normPartOf(count, [&](std::size_t i) { return bf16ToFloat(h[i]); });
  }
  return {};
}

// The threads share fixed-size chunks and the chunks' sums are added in chunk order, so the
// norm has the same bits whatever the thread count (resuming on another machine, say). Serial,
// the pass took 0.9% of a 4 x 256 GPT-2's step with the other core idle.
constexpr std::size_t kNormChunk = std::size_t{1} << 16;

}  // namespace

NormPart normPart(DType t, const void* base, std::size_t count) {
  const std::size_t chunks = (count + kNormChunk - 1) / kNormChunk;
  if (chunks <= 1) return normPartSerial(t, base, count);
  std::vector<NormPart> parts(chunks);
  const auto* bytes = static_cast<const char*>(base);
  const std::size_t es = dtypeSize(t);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(chunks); ++c) {
    const std::size_t first = static_cast<std::size_t>(c) * kNormChunk;
    parts[static_cast<std::size_t>(c)] =
        normPartSerial(t, bytes + first * es, std::min(kNormChunk, count - first));
  }
  NormPart whole;
  for (const NormPart& p : parts) whole.sumSq += p.sumSq;
  whole.nonFinite = std::isfinite(whole.sumSq) ? 0 : 1;
  return whole;
}

}  // namespace zrt
