// The measurement readers: the memory line as zrt-train writes it (tools/trainer/step_log.h's
// memoryJson of a real MemoryLedger, with peaks that differ from current values) read back to
// the byte, a log whose run ended early, and the step lines.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/memory_ledger.h"
#include "step_log.h"
#include "tools/ladder/measurement.h"

using namespace zrt;
using namespace zrt::ladder;

TEST_CASE("the memory line reads back every cell's peak and the peak of each place's sum, exactly") {
  MemoryLedger ledger;
  ledger.charge(MemTag::Parameters, MemPlace::Device, 3'336'193);
  ledger.charge(MemTag::Gradients, MemPlace::PinnedHost, 1'668'096);
  ledger.charge(MemTag::OptimizerState, MemPlace::Nvme, 5'004'288);
  ledger.charge(MemTag::Activations, MemPlace::Device, 11'812'864);
  ledger.charge(MemTag::Other, MemPlace::Device, 793'088);
  ledger.charge(MemTag::CommBuckets, MemPlace::Host, 6'672'385);
  ledger.charge(MemTag::SwapBuffers, MemPlace::PinnedHost, 700);
  // A transient: the activations' peak and the device total's peak are above their current.
  ledger.charge(MemTag::Activations, MemPlace::Device, 4'000'000);
  ledger.release(MemTag::Activations, MemPlace::Device, 4'000'000);
  ledger.charge(MemTag::GatheredParameters, MemPlace::Device, 2'000'000);
  ledger.release(MemTag::GatheredParameters, MemPlace::Device, 2'000'000);

  const std::string log = "{\"step\":1,\"step_s\":0.5}\n{\"step\":2,\"step_s\":0.25}\n" +
                          trainer::memoryJson(ledger) + "\n";
  const LedgerReading r = parseMemoryLine(log);
  for (int t = 0; t < kNumMemTags; ++t)
    for (int p = 0; p < kNumMemPlaces; ++p) {
      const auto tag = static_cast<MemTag>(t);
      const auto place = static_cast<MemPlace>(p);
      CAPTURE(nameOf(tag));
      CAPTURE(nameOf(place));
      CHECK(r.peaks.get(tag, place) == ledger.get(tag, place).peak);
    }
  for (int p = 0; p < kNumMemPlaces; ++p) CHECK(r.placePeak[p] == ledger.total(static_cast<MemPlace>(p)).peak);
  // The device total's peak (with the 4 MB transient) is not the sum of the cells' peaks (the
  // activations' 4 MB and the gathered 2 MB never coexisted).
  CHECK(r.devicePeak() == 3'336'193 + 11'812'864 + 793'088 + 4'000'000);
  CHECK(r.devicePeak() < r.peaks.total(MemPlace::Device));
  CHECK(r.hostPeak() == 1'668'096 + 700 + 6'672'385);
  CHECK(r.nvmePeak() == 5'004'288);
  CHECK(r.peaks.modelStates(MemPlace::Device) == 3'336'193);
  // The step lines around it still read.
  CHECK(parseStepLog(log).seconds == std::vector<double>{0.5, 0.25});
}

TEST_CASE("a log without the memory line, or with a cell missing, is an error that says so") {
  CHECK_THROWS_WITH_AS(parseMemoryLine("{\"step\":1,\"step_s\":0.5}\n"),
                       doctest::Contains("last line is not the memory ledger"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parseMemoryLine(""), doctest::Contains("last line is not the memory ledger"), InvalidArgument);
  MemoryLedger ledger;
  nlohmann::json j = nlohmann::json::parse(trainer::memoryJson(ledger));
  j["memory"].erase("activations");
  CHECK_THROWS_WITH_AS(parseMemoryLine(j.dump()), doctest::Contains("lacks \"activations\""), InvalidArgument);
  j = nlohmann::json::parse(trainer::memoryJson(ledger));
  j["total"]["nvme"]["peak"] = -1;
  CHECK_THROWS_WITH_AS(parseMemoryLine(j.dump()), doctest::Contains("\"total\"/\"nvme\""), InvalidArgument);
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
