#include "tools/ladder/comparison.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/units.h"

namespace zrt::ladder {

double relativeDifference(std::uint64_t predicted, std::uint64_t measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return (static_cast<double>(predicted) - static_cast<double>(measured)) / static_cast<double>(measured);
}

std::string formatDifference(double d) {
  if (std::isinf(d)) return d > 0 ? "+inf" : "-inf";
  char buf[32];
  // Rounded to whole percent, the sign kept even for "0": "+0%" says "not more", "-0%" less.
  std::snprintf(buf, sizeof buf, "%+.0f%%", d * 100);
  return buf;
}

bool Check::ok() const { return std::abs(difference) <= tolerance; }

bool Agreement::ok() const {
  for (const Check& c : checks)
    if (!c.ok()) return false;
  return true;
}

std::string Agreement::summary() const {
  std::string s;
  for (const Check& c : checks) {
    if (c.ok()) continue;
    if (!s.empty()) s += "; ";
    s += c.what + " " + formatDifference(c.difference);
    if (c.largestGap)
      s += " (" + std::string(nameOf(c.largestGap->tag)) + ", " + std::string(nameOf(c.largestGap->place)) +
           ": plan " + formatBytes(c.largestGap->predicted) + ", ledger " + formatBytes(c.largestGap->measured) + ")";
  }
  return s.empty() ? "ok" : s;
}

namespace {

std::optional<Gap> largestGap(const MemoryBytes& predicted, const MemoryBytes& measured,
                              const std::vector<MemPlace>& places, bool modelStatesOnly) {
  std::optional<Gap> best;
  std::uint64_t bestDiff = 0;
  for (MemPlace place : places)
    for (int t = 0; t < kNumMemTags; ++t) {
      const auto tag = static_cast<MemTag>(t);
      if (modelStatesOnly && !isModelState(tag)) continue;
      const std::uint64_t p = predicted.get(tag, place), m = measured.get(tag, place);
      const std::uint64_t diff = p > m ? p - m : m - p;
      if (diff > bestDiff) {
        bestDiff = diff;
        best = Gap{tag, place, p, m};
      }
    }
  return best;
}

}  // namespace

Agreement compare(const MemoryBytes& predicted, std::uint64_t predictedDevicePeak,
                  const LedgerReading& measured, const Tolerances& tol) {
  Agreement a;
  const MemoryBytes& m = measured.peaks;
  auto add = [&](std::string what, std::uint64_t p, std::uint64_t meas, double tolerance,
                 const std::vector<MemPlace>& places, bool statesOnly) {
    Check c;
    c.what = std::move(what);
    c.predicted = p;
    c.measured = meas;
    c.difference = relativeDifference(p, meas);
    c.tolerance = tolerance;
    c.largestGap = largestGap(predicted, m, places, statesOnly);
    a.checks.push_back(std::move(c));
  };
  add("model states, device", predicted.modelStates(MemPlace::Device), m.modelStates(MemPlace::Device),
      tol.modelStates, {MemPlace::Device}, true);
  if (predicted.hostModelStates() || m.hostModelStates())
    add("model states, host", predicted.hostModelStates(), m.hostModelStates(), tol.modelStates,
        {MemPlace::PinnedHost, MemPlace::Host}, true);
  if (predicted.modelStates(MemPlace::Nvme) || m.modelStates(MemPlace::Nvme))
    add("model states, NVMe", predicted.modelStates(MemPlace::Nvme), m.modelStates(MemPlace::Nvme),
        tol.modelStates, {MemPlace::Nvme}, true);
  add("device peak", predictedDevicePeak, measured.devicePeak(), tol.overall, {MemPlace::Device}, false);
  return a;
}

}  // namespace zrt::ladder
