// Prediction against measurement: the relative difference, the tolerances at their edges, which
// places are checked, and the cell a disagreement is blamed on.
#include <doctest/doctest.h>

#include <cmath>

#include "tools/ladder/comparison.h"

using namespace zrt;
using namespace zrt::ladder;

namespace {

const Check& checkNamed(const Agreement& a, const std::string& what) {
  for (const Check& c : a.checks)
    if (c.what == what) return c;
  FAIL("no check named ", what);
  return a.checks.front();
}

bool hasCheck(const Agreement& a, const std::string& what) {
  for (const Check& c : a.checks)
    if (c.what == what) return true;
  return false;
}

// A measurement whose cells are `m` and whose device peak is their device sum (everything
// allocated at once, as zrt-train's buffers are).
LedgerReading reading(const MemoryBytes& m) {
  LedgerReading r;
  r.peaks = m;
  for (int p = 0; p < kNumMemPlaces; ++p) r.placePeak[p] = m.total(static_cast<MemPlace>(p));
  return r;
}

}  // namespace

TEST_CASE("relative difference is (plan - ledger) / ledger") {
  CHECK(relativeDifference(110, 100) == doctest::Approx(0.10));
  CHECK(relativeDifference(90, 100) == doctest::Approx(-0.10));
  CHECK(relativeDifference(100, 100) == 0.0);
  CHECK(relativeDifference(0, 0) == 0.0);
  CHECK(std::isinf(relativeDifference(5, 0)));
  CHECK(relativeDifference(0, 5) == -1.0);
  CHECK(formatDifference(0.234) == "+23%");
  CHECK(formatDifference(-0.10) == "-10%");
  CHECK(formatDifference(0.0) == "+0%");
  CHECK(formatDifference(relativeDifference(5, 0)) == "+inf");
}

TEST_CASE("model states within 5% and the device peak within 15% agree, beyond do not") {
  MemoryBytes plan;
  plan.add(MemTag::Parameters, MemPlace::Device, 1000);
  plan.add(MemTag::Gradients, MemPlace::Device, 1000);
  plan.add(MemTag::OptimizerState, MemPlace::Device, 2000);
  plan.add(MemTag::Activations, MemPlace::Device, 6000);

  MemoryBytes meas = plan;
  Agreement a = compare(plan, plan.total(MemPlace::Device), reading(meas));
  CHECK(a.ok());
  CHECK(a.summary() == "ok");
  REQUIRE(a.checks.size() == 2);  // nothing in host memory or on NVMe: only the device checks
  CHECK(a.checks[0].what == "model states, device");
  CHECK(a.checks[1].what == "device peak");

  // Model states measured 4000 / 0.95 = 4210.5: the plan is 5.0% under; at 4211 just over 5%.
  meas = plan;
  meas.add(MemTag::OptimizerState, MemPlace::Device, 210);  // states 4210: -4.99%
  a = compare(plan, plan.total(MemPlace::Device), reading(meas));
  CHECK(checkNamed(a, "model states, device").ok());
  meas.add(MemTag::OptimizerState, MemPlace::Device, 1);  // 4211: -5.01%
  a = compare(plan, plan.total(MemPlace::Device), reading(meas));
  CHECK(!checkNamed(a, "model states, device").ok());
  CHECK(checkNamed(a, "device peak").ok());  // 10000 against 10211: -2%
  CHECK(!a.ok());

  // The device peak: 10000 planned against 11764 measured is -15.0%; against 11765, -15.001%.
  meas = plan;
  meas.add(MemTag::Activations, MemPlace::Device, 1764);
  a = compare(plan, plan.total(MemPlace::Device), reading(meas));
  CHECK(a.ok());
  meas.add(MemTag::Activations, MemPlace::Device, 1);
  a = compare(plan, plan.total(MemPlace::Device), reading(meas));
  CHECK(!checkNamed(a, "device peak").ok());
  CHECK(checkNamed(a, "model states, device").ok());
}

TEST_CASE("the device peak check uses the ledger's total row, not the sum of the cells") {
  MemoryBytes plan;
  plan.add(MemTag::Activations, MemPlace::Device, 1000);
  LedgerReading r = reading(plan);
  r.peaks.add(MemTag::GatheredParameters, MemPlace::Device, 500);  // a peak that never met the other
  const Agreement a = compare(plan, 1000, r);
  CHECK(checkNamed(a, "device peak").measured == 1000);
  CHECK(a.ok());
}

TEST_CASE("host and NVMe model states are checked where either side has them") {
  MemoryBytes plan;
  plan.add(MemTag::Parameters, MemPlace::PinnedHost, 800);
  plan.add(MemTag::OptimizerState, MemPlace::Nvme, 3000);
  plan.add(MemTag::Activations, MemPlace::Device, 100);
  MemoryBytes meas;
  meas.add(MemTag::Parameters, MemPlace::Host, 800);  // pageable instead of pinned: still host
  meas.add(MemTag::OptimizerState, MemPlace::Nvme, 3000);
  meas.add(MemTag::Activations, MemPlace::Device, 100);
  Agreement a = compare(plan, 100, reading(meas));
  CHECK(hasCheck(a, "model states, host"));
  CHECK(hasCheck(a, "model states, NVMe"));
  CHECK(a.ok());
  // The run put the optimizer state in host memory instead of on NVMe: both checks fail.
  meas = {};
  meas.add(MemTag::Parameters, MemPlace::Host, 800);
  meas.add(MemTag::OptimizerState, MemPlace::PinnedHost, 3000);
  meas.add(MemTag::Activations, MemPlace::Device, 100);
  a = compare(plan, 100, reading(meas));
  CHECK(!checkNamed(a, "model states, host").ok());
  CHECK(!checkNamed(a, "model states, NVMe").ok());
  CHECK(std::isinf(checkNamed(a, "model states, NVMe").difference));
  // Model states are the three state tags: buffers on the host do not count as states.
  plan = {};
  meas = {};
  plan.add(MemTag::Activations, MemPlace::Device, 10);
  meas.add(MemTag::Activations, MemPlace::Device, 10);
  meas.add(MemTag::CommBuckets, MemPlace::Host, 999);
  CHECK(!hasCheck(compare(plan, 10, reading(meas)), "model states, host"));
}

TEST_CASE("a disagreement names the cell that differs most") {
  MemoryBytes plan;
  plan.add(MemTag::Parameters, MemPlace::Device, 4000);
  plan.add(MemTag::CommBuckets, MemPlace::Device, 3000);
  plan.add(MemTag::Activations, MemPlace::Device, 2000);
  MemoryBytes meas;
  meas.add(MemTag::Parameters, MemPlace::Device, 4000);
  meas.add(MemTag::CommBuckets, MemPlace::Host, 3000);  // not on the device at all
  meas.add(MemTag::Activations, MemPlace::Device, 2100);
  meas.add(MemTag::Other, MemPlace::Device, 500);
  const Agreement a = compare(plan, plan.total(MemPlace::Device), reading(meas));
  const Check& peak = checkNamed(a, "device peak");
  CHECK(peak.predicted == 9000);
  CHECK(peak.measured == 6600);
  CHECK(!peak.ok());
  REQUIRE(peak.largestGap);
  CHECK(peak.largestGap->tag == MemTag::CommBuckets);
  CHECK(peak.largestGap->place == MemPlace::Device);
  CHECK(a.summary() == "device peak +36% (comm buckets, device: plan 2.93 KiB, ledger 0 B)");
}
