// The step log's renderings (tools/trainer/step_log.h): the JSON line carries the keys issue 16
// names, val_loss only when evaluated, values exact; the printed line carries each figure.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "step_log.h"

using namespace zrt::trainer;

TEST_CASE("the JSON line has the issue's keys, and val_loss only when evaluated") {
  StepRecord r;
  r.step = 7;
  r.steps = 10;
  r.loss = 3.141592653589793;
  r.tokensPerSecond = 1234.5;
  r.skipped = true;
  r.lr = 1e-3;
  r.lossScale = 65536;
  r.gradNorm = 0.5;
  const auto j = nlohmann::json::parse(stepJson(r));
  CHECK(j.at("step") == 7);
  CHECK(j.at("loss").get<double>() == 3.141592653589793);  // full precision: tests compare runs
  CHECK_FALSE(j.contains("val_loss"));
  CHECK(j.at("tokens_per_s") == 1234.5);
  CHECK(j.at("skipped") == true);
  CHECK(j.at("lr") == 1e-3);
  CHECK(j.at("loss_scale") == 65536);
  CHECK(j.at("grad_norm") == 0.5);
  CHECK(j.at("io_s") == 0);
  CHECK(stepJson(r).find('\n') == std::string::npos);

  r.valLoss = 2.5;
  CHECK(nlohmann::json::parse(stepJson(r)).at("val_loss") == 2.5);
}

TEST_CASE("the printed line shows every figure, the ETA only when asked") {
  StepRecord r;
  r.step = 12;
  r.steps = 200;
  r.loss = 3.21449;
  r.valLoss = 3.30118;
  r.tokensPerSecond = 2034.4;
  r.lossScale = 1;
  r.gradNorm = 0.8412;
  r.lr = 1e-3;
  r.stepSeconds = 0.952;
  r.computeSeconds = 0.801;
  r.commSeconds = 0.05;
  r.optimizerSeconds = 0.101;
  r.etaSeconds = 192;
  const std::string line = formatStepLine(r, false);
  CHECK(line ==
        "step 12/200 loss 3.2145 val 3.3012 | 2034 tok/s | scale 1 | grad norm 0.841 | lr 1.00e-03 "
        "| 0.952 s: compute 0.801 comm 0.050 optimizer 0.101 io 0.000");
  CHECK(formatStepLine(r, true) == line + " | eta 3m12s");
  r.skipped = true;
  CHECK(formatStepLine(r, false) == line + " (skipped)");
}

TEST_CASE("durations read as seconds, minutes or hours") {
  CHECK(formatDuration(0) == "0s");
  CHECK(formatDuration(44.6) == "45s");
  CHECK(formatDuration(192) == "3m12s");
  CHECK(formatDuration(7500) == "2h05m");
  CHECK(formatDuration(-3) == "0s");
}

TEST_CASE("the memory line holds the ledger in exact bytes, by the names nameOf() prints") {
  zrt::MemoryLedger ledger;
  ledger.charge(zrt::MemTag::Parameters, zrt::MemPlace::Device, 3'336'193);
  ledger.charge(zrt::MemTag::Activations, zrt::MemPlace::Device, 1'000'001);
  ledger.release(zrt::MemTag::Activations, zrt::MemPlace::Device, 1'000'000);
  ledger.charge(zrt::MemTag::CommBuckets, zrt::MemPlace::Host, 7);
  const std::string line = memoryJson(ledger);
  CHECK(line.find('\n') == std::string::npos);
  const auto j = nlohmann::json::parse(line);
  const auto& params = j.at("memory").at(std::string(zrt::nameOf(zrt::MemTag::Parameters)));
  CHECK(params.at("device").at("current") == 3'336'193);
  CHECK(params.at("device").at("peak") == 3'336'193);
  const auto& acts = j.at("memory").at("activations").at("device");
  CHECK(acts.at("current") == 1);
  CHECK(acts.at("peak") == 1'000'001);
  CHECK(j.at("memory").at("comm buckets").at("host").at("peak") == 7);
  CHECK(j.at("memory").at("other").at("nvme").at("peak") == 0);
  // Every tag and place is there; a total's peak is the peak of the sum.
  CHECK(j.at("memory").size() == static_cast<std::size_t>(zrt::kNumMemTags));
  for (const auto& [tag, places] : j.at("memory").items()) CHECK(places.size() == static_cast<std::size_t>(zrt::kNumMemPlaces));
  CHECK(j.at("total").at("device").at("peak") == 3'336'193 + 1'000'001);
  CHECK(j.at("total").at("device").at("current") == 3'336'193 + 1);
  CHECK(j.at("total").at("pinned host").at("peak") == 0);
}
