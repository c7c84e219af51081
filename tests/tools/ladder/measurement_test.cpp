// The measurement readers: sizes as formatBytes prints them, a real MemoryLedger's table (the
// trainer prints exactly this) with peaks that differ from current values, and the step log.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.h"
#include "core/memory_ledger.h"
#include "core/units.h"
#include "tools/ladder/measurement.h"

using namespace zrt;
using namespace zrt::ladder;

namespace {

// A printed size is the true one rounded to two decimals of its unit: within half a hundredth
// of the unit.
void checkWithinPrinting(std::uint64_t parsed, std::uint64_t truth) {
  CAPTURE(truth);
  CAPTURE(formatBytes(truth));
  double unit = 1;
  while (static_cast<double>(truth) >= unit * 1024 && unit < 1024.0 * 1024 * 1024 * 1024) unit *= 1024;
  const double slack = unit == 1 ? 0 : 0.005 * unit;
  CHECK(std::abs(static_cast<double>(parsed) - static_cast<double>(truth)) <= slack + 0.5);
}

}  // namespace

TEST_CASE("printed sizes read back") {
  CHECK(parsePrintedBytes("0 B") == 0);
  CHECK(parsePrintedBytes("512 B") == 512);
  CHECK(parsePrintedBytes("1023 B") == 1023);
  CHECK(parsePrintedBytes("1.50 KiB") == 1536);
  CHECK(parsePrintedBytes("  3.00 GiB ") == 3ull << 30);
  CHECK(parsePrintedBytes("2.00 TiB") == 2ull << 40);
  CHECK(parsePrintedBytes("3.18 MiB") == static_cast<std::uint64_t>(std::llround(3.18 * 1048576)));
  for (std::uint64_t b : {1ull, 1000ull, 1024ull, 1536ull, 999'999ull, 3'336'192ull, 123'456'789'012ull})
    checkWithinPrinting(parsePrintedBytes(formatBytes(b)), b);
  CHECK_THROWS_WITH_AS(parsePrintedBytes("3.18 XiB"), doctest::Contains("'3.18 XiB'"), InvalidArgument);
  CHECK_THROWS_AS(parsePrintedBytes("MiB"), InvalidArgument);
  CHECK_THROWS_AS(parsePrintedBytes("-1 B"), InvalidArgument);
  CHECK_THROWS_AS(parsePrintedBytes("12"), InvalidArgument);
}

TEST_CASE("a memory ledger's table reads back peaks per cell and the peak of each place's sum") {
  MemoryLedger ledger;
  ledger.charge(MemTag::Parameters, MemPlace::Device, 3'336'192);
  ledger.charge(MemTag::Gradients, MemPlace::PinnedHost, 1'668'096);
  ledger.charge(MemTag::OptimizerState, MemPlace::Nvme, 5'004'288);
  ledger.charge(MemTag::Activations, MemPlace::Device, 11'812'864);
  ledger.charge(MemTag::Other, MemPlace::Device, 793'088);
  ledger.charge(MemTag::CommBuckets, MemPlace::Host, 6'672'384);
  ledger.charge(MemTag::SwapBuffers, MemPlace::PinnedHost, 700);
  // A transient: the activations' peak and the device total's peak are above their current.
  ledger.charge(MemTag::Activations, MemPlace::Device, 4'000'000);
  ledger.release(MemTag::Activations, MemPlace::Device, 4'000'000);
  ledger.charge(MemTag::GatheredParameters, MemPlace::Device, 2'000'000);
  ledger.release(MemTag::GatheredParameters, MemPlace::Device, 2'000'000);

  const std::string output = "step 3/3 loss 5.5 | 4400 tok/s\ntrained 3 steps in 0s\nrank 0 memory:\n" +
                             ledger.table() + "[zrt rank 0] warning: something after the table\n";
  const LedgerReading r = parseLedgerTable(output);
  for (int t = 0; t < kNumMemTags; ++t)
    for (int p = 0; p < kNumMemPlaces; ++p) {
      const auto tag = static_cast<MemTag>(t);
      const auto place = static_cast<MemPlace>(p);
      CAPTURE(nameOf(tag));
      CAPTURE(nameOf(place));
      checkWithinPrinting(r.peaks.get(tag, place), ledger.get(tag, place).peak);
    }
  for (int p = 0; p < kNumMemPlaces; ++p) checkWithinPrinting(r.placePeak[p], ledger.total(static_cast<MemPlace>(p)).peak);
  // The device total's peak (with the 4 MB transient) is not the sum of the cells' peaks (the
  // activations' 4 MB and the gathered 2 MB never coexisted).
  const std::uint64_t sumOfPeaks = r.peaks.total(MemPlace::Device);
  CHECK(r.devicePeak() < sumOfPeaks);
  checkWithinPrinting(r.devicePeak(), 3'336'192 + 11'812'864 + 793'088 + 4'000'000);
  checkWithinPrinting(r.hostPeak(), ledger.total(MemPlace::PinnedHost).peak + ledger.total(MemPlace::Host).peak);
  checkWithinPrinting(r.nvmePeak(), 5'004'288);
  CHECK(r.peaks.modelStates(MemPlace::Device) == r.peaks.get(MemTag::Parameters, MemPlace::Device));
}

TEST_CASE("the last of several tables is read") {
  MemoryLedger a, b;
  a.charge(MemTag::Parameters, MemPlace::Device, 100);
  b.charge(MemTag::Parameters, MemPlace::Device, 200);
  CHECK(parseLedgerTable(a.table() + b.table()).devicePeak() == 200);
}

TEST_CASE("output without a readable table is an error that says what is missing") {
  CHECK_THROWS_WITH_AS(parseLedgerTable("zrt-train: the model does not fit\n"),
                       doctest::Contains("no memory ledger table"), InvalidArgument);
  MemoryLedger ledger;
  std::string t = ledger.table();
  const std::size_t pos = t.find("| activations");
  REQUIRE(pos != std::string::npos);
  t.replace(pos, 13, "| imagination");
  CHECK_THROWS_WITH_AS(parseLedgerTable(t), doctest::Contains("unknown tag 'imagination'"), InvalidArgument);
  const std::string cut = ledger.table().substr(0, ledger.table().find("| total"));
  CHECK_THROWS_WITH_AS(parseLedgerTable(cut), doctest::Contains("no total row"), InvalidArgument);
}

TEST_CASE("step times: the median after the first step") {
  const StepTimes t = parseStepLog(
      "{\"step\":1,\"step_s\":5.0}\n{\"step\":2,\"step_s\":1.0}\n\n{\"step\":3,\"step_s\":3.0}\n"
      "{\"step\":4,\"step_s\":2.0}\n");
  CHECK(t.seconds == std::vector<double>{5, 1, 3, 2});
  CHECK(t.typical() == 2.0);  // median of 1, 3, 2
  CHECK(StepTimes::typicalOf({5, 1, 3, 2, 4}) == 2.5);
  CHECK(StepTimes::typicalOf({0.7}) == 0.7);
  CHECK(StepTimes{}.typical() == 0);
  CHECK_THROWS_WITH_AS(parseStepLog("{\"step\":1,\"step_s\":1}\nnot json\n"), doctest::Contains("line 2"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(parseStepLog("{\"step\":1}\n"), doctest::Contains("step_s"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parseStepLog(""), doctest::Contains("no step"), InvalidArgument);
}

TEST_CASE("compute times are read beside step times, and must be on every step or none") {
  const StepTimes t = parseStepLog(
      "{\"step_s\":0.9,\"compute_s\":0.5}\n{\"step_s\":0.3,\"compute_s\":0.2}\n{\"step_s\":0.4,\"compute_s\":0.1}\n");
  CHECK(t.compute == std::vector<double>{0.5, 0.2, 0.1});
  CHECK(t.typicalCompute() == doctest::Approx(0.15));
  CHECK(t.typical() == doctest::Approx(0.35));
  CHECK(parseStepLog("{\"step_s\":1}\n").typicalCompute() == 0);
  CHECK_THROWS_WITH_AS(parseStepLog("{\"step_s\":1,\"compute_s\":0.5}\n{\"step_s\":1}\n"),
                       doctest::Contains("compute_s on 1 of its 2 steps"), InvalidArgument);
}
