#include "step_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace zrt::trainer {

std::string formatDuration(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
  return buf;
}

std::string formatStepLine(const StepRecord& r, bool withEta) {
  char buf[512];
  std::string line;
  std::snprintf(buf, sizeof buf, "step %lld/%lld loss %.4f", static_cast<long long>(r.step),
                static_cast<long long>(r.steps), r.loss);
  line += buf;
  if (r.valLoss) {
    std::snprintf(buf, sizeof buf, " val %.4f", *r.valLoss);
    line += buf;
  }
  std::snprintf(buf, sizeof buf,
                " | %.0f tok/s | scale %g | grad norm %.3f | lr %.2e | %.3f s: compute %.3f comm %.3f "
                "optimizer %.3f io %.3f",
                r.tokensPerSecond, r.lossScale, r.gradNorm, r.lr, r.stepSeconds, r.computeSeconds,
                r.commSeconds, r.optimizerSeconds, r.ioSeconds);
  line += buf;
  if (withEta) line += " | eta " + formatDuration(r.etaSeconds);
  if (r.skipped) line += " (skipped)";
  return line;
}

std::string stepJson(const StepRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  if (r.valLoss) j["val_loss"] = *r.valLoss;
  j["tokens_per_s"] = r.tokensPerSecond;
  j["skipped"] = r.skipped;
  j["lr"] = r.lr;
  j["loss_scale"] = r.lossScale;
  j["grad_norm"] = r.gradNorm;
  j["step_s"] = r.stepSeconds;
  j["compute_s"] = r.computeSeconds;
  j["comm_s"] = r.commSeconds;
  j["optimizer_s"] = r.optimizerSeconds;
  j["io_s"] = r.ioSeconds;
  return j.dump();
}

std::string memoryJson(const MemoryLedger& ledger) {
  auto counter = [](const MemoryLedger::Counter& c) { return nlohmann::json{{"current", c.current}, {"peak", c.peak}}; };
  nlohmann::json memory = nlohmann::json::object(), total = nlohmann::json::object();
  for (int p = 0; p < kNumMemPlaces; ++p) {
    const auto place = static_cast<MemPlace>(p);
    for (int t = 0; t < kNumMemTags; ++t) {
      const auto tag = static_cast<MemTag>(t);
      memory[std::string(nameOf(tag))][std::string(nameOf(place))] = counter(ledger.get(tag, place));
    }
    total[std::string(nameOf(place))] = counter(ledger.total(place));
  }
  return nlohmann::json{{"memory", memory}, {"total", total}}.dump();
}

}  // namespace zrt::trainer
