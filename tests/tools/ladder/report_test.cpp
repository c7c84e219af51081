// The table and the JSON: a rung that agrees says "ok", one that does not says DISAGREE with the
// difference and the cell it comes from, a rung that could not run says why, and the counts at
// the bottom add up.
#include <doctest/doctest.h>

#include "tools/ladder/report.h"

using namespace zrt;
using namespace zrt::ladder;

namespace {

RungResult ranRung(const Rung& rung, const MemoryBytes& plan, const MemoryBytes& meas, double stepSeconds) {
  RungResult r;
  r.rung = rung;
  r.status = RungStatus::Ran;
  r.prediction.bytes = plan;
  r.measured.peaks = meas;
  for (int p = 0; p < kNumMemPlaces; ++p) r.measured.placePeak[p] = meas.total(static_cast<MemPlace>(p));
  r.steps.seconds = {9.0, stepSeconds};
  r.steps.compute = {8.0, stepSeconds / 2};
  r.agreement = compare(plan, plan.total(MemPlace::Device), r.measured);
  return r;
}

LadderResult example() {
  LadderResult res;
  res.spec.budgetBytes = 6000;
  res.steps = 2;
  res.trainer = "/bin/zrt-train";
  const std::vector<Rung> rungs = ladderRungs(res.spec);
  MemoryBytes plan;
  plan.add(MemTag::Parameters, MemPlace::Device, 4000);
  plan.add(MemTag::CommBuckets, MemPlace::Device, 3000);
  MemoryBytes meas;
  meas.add(MemTag::Parameters, MemPlace::Device, 4000);
  meas.add(MemTag::CommBuckets, MemPlace::Host, 3000);
  res.rungs.push_back(ranRung(rungs[0], plan, meas, 0.5));  // device peak 7000 planned, 4000 used
  res.rungs.push_back(ranRung(rungs[1], meas, meas, 0.25));  // agrees
  RungResult lora;
  lora.rung = rungs[8];
  lora.status = RungStatus::NotAvailable;
  lora.note = "zrt-train has no --lora-rank";
  lora.prediction.bytes = plan;
  res.rungs.push_back(lora);
  return res;
}

LadderResult withFailure() {
  LadderResult res = example();
  RungResult failed;
  failed.rung = ladderRungs(res.spec)[2];
  failed.status = RungStatus::Failed;
  failed.note = "zrt-train exit 2; its output's last lines:\nzrt-train: the model does not fit";
  res.rungs.push_back(failed);
  return res;
}

}  // namespace

TEST_CASE("the table shows agreement, disagreement and rungs that did not run") {
  const LadderResult res = example();
  const std::string t = formatTable(res);
  CAPTURE(t);
  CHECK(t.find("DISAGREE: device peak +75% (comm buckets, device: plan 2.93 KiB, ledger 0 B)") != std::string::npos);
  CHECK(t.find("| ok\n") != std::string::npos);
  CHECK(t.find("not available (zrt-train has no --lora-rank)") != std::string::npos);
  CHECK(t.find("2 of 3 rungs ran; prediction and measurement agree on 1 of them.") != std::string::npos);
  // Fits: 4000 measured within the 6000 budget, where the plan's 7000 would not be.
  CHECK(t.find("yes (plan: no)") != std::string::npos);
  // tokens/s: 16 sequences x 64 tokens / 0.5 s.
  CHECK(t.find(" 2048 ") != std::string::npos);
  CHECK(t.find(" 4096 ") != std::string::npos);
  const std::string d = formatDetail(res);
  CHECK(d.find("comm buckets, host") != std::string::npos);
  CHECK(d.find("did not run: plan only") != std::string::npos);
}

TEST_CASE("the JSON carries every check and the verdicts") {
  const nlohmann::json j = toJson(example());
  REQUIRE(j["rungs"].size() == 3);
  const nlohmann::json& a = j["rungs"][0];
  CHECK(a["status"] == "ran");
  CHECK(a["id"] == "z0");
  CHECK(a["agree"] == false);
  CHECK(a["predicted"]["device_peak"] == 7000);
  CHECK(a["measured"]["device_peak"] == 4000);
  CHECK(a["measured"]["host"] == 3000);
  CHECK(a["measured"]["cells"]["comm buckets"]["host"] == 3000);
  CHECK(a["step_seconds"] == 0.5);
  CHECK(a["compute_seconds"] == 0.25);
  CHECK(a["tokens_per_second"] == doctest::Approx(2048));
  CHECK(a["fits"] == true);
  CHECK(a["predicted_fits"] == false);
  bool peakChecked = false;
  for (const auto& c : a["checks"])
    if (c["what"] == "device peak") {
      peakChecked = true;
      CHECK(c["ok"] == false);
      CHECK(c["difference"] == doctest::Approx(0.75));
      CHECK(c["tolerance"] == 0.15);
    }
  CHECK(peakChecked);
  CHECK(j["rungs"][1]["agree"] == true);
  CHECK(j["rungs"][2]["status"] == "not available");
  CHECK(j["rungs"][2]["note"] == "zrt-train has no --lora-rank");
  CHECK(!j["rungs"][2].contains("measured"));
  CHECK(j["model"]["parameters"] == 834'304);
}

TEST_CASE("a failed rung's row says so on one line, and the JSON keeps the whole note") {
  const LadderResult res = withFailure();
  CHECK(!res.allRan());
  const std::string t = formatTable(res);
  CHECK(t.find("| failed (zrt-train exit 2; its output's last lines:)\n") != std::string::npos);
  CHECK(t.find("the model does not fit") == std::string::npos);
  CHECK(toJson(res)["rungs"][3]["note"] == res.rungs[3].note);
  CHECK(toJson(res)["rungs"][3]["status"] == "failed");
  CHECK(example().allRan());
  CHECK(!example().allAgree());
}
