#include "tools/ladder/report.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/units.h"

namespace zrt::ladder {

namespace {

std::string line(const char* format, auto... args) {
  char buf[1024];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

std::string statusName(RungStatus s) {
  switch (s) {
    case RungStatus::Ran: return "ran";
    case RungStatus::Failed: return "failed";
    case RungStatus::NotAvailable: return "not available";
  }
  return "?";
}

// A failure's note carries the trainer's last lines; the table row takes the first.
std::string firstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string batchOf(const Rung& r) {
  return detail::cat(r.strategy.microBatch, " x ", r.strategy.gradAccum);
}

const Check* findCheck(const Agreement& a, const std::string& what) {
  for (const Check& c : a.checks)
    if (c.what == what) return &c;
  return nullptr;
}

std::string fitsCell(const RungResult& r, std::uint64_t budget) {
  const bool fits = r.fits(budget), planFits = r.predictedFits(budget);
  std::string s = fits ? "yes" : "no";
  if (fits != planFits) s += planFits ? " (plan: yes)" : " (plan: no)";
  return s;
}

nlohmann::json cellsJson(const MemoryBytes& b) {
  nlohmann::json cells = nlohmann::json::object();
  for (int t = 0; t < kNumMemTags; ++t)
    for (int p = 0; p < kNumMemPlaces; ++p) {
      const auto tag = static_cast<MemTag>(t);
      const auto place = static_cast<MemPlace>(p);
      if (b.get(tag, place)) cells[std::string(nameOf(tag))][std::string(nameOf(place))] = b.get(tag, place);
    }
  return cells;
}

nlohmann::json finiteOrNull(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

std::string formatTable(const LadderResult& res) {
  const LadderSpec& s = res.spec;
  const std::uint64_t budget = s.budgetBytes;
  std::string out;
  const plan::ModelSpec model = gpt2PlanModel(s.model);
  out += line("zrt-ladder: GPT-2 %d layers x %d wide, %d heads, T %d, vocab 256 (%.3fM parameters); %d rank(s); "
              "global batch %llu sequences; budget %s of device memory per rank; %d steps per rung\n",
              s.model.layers, s.model.hidden, s.model.heads, s.model.seqLen,
              static_cast<double>(model.totalParams()) / 1e6, s.ranks,
              static_cast<unsigned long long>(s.microBatch * s.gradAccum * static_cast<std::uint64_t>(s.ranks)),
              formatBytes(budget).c_str(), res.steps);
  out += "Bytes per rank (rank 0). plan: zrt-plan's bill for the rung's config (model states + buffers + "
         "activations); ledger: the run's peak; diff = (plan - ledger) / ledger.\n\n";
  out += line("%-16s %-17s %8s | %11s %11s %6s | %11s %11s %6s | %11s %11s | %7s %9s %9s | %-14s | %s\n", "rung",
              "levers", "mb x acc", "device plan", "ledger", "diff", "states plan", "ledger", "diff",
              "host", "nvme", "step s", "compute s", "tokens/s", "fits budget", "agreement");
  for (const RungResult& r : res.rungs) {
    const std::string pDev = formatBytes(r.prediction.devicePeak());
    const std::string pStates = formatBytes(r.prediction.bytes.modelStates(MemPlace::Device));
    if (!r.ran()) {
      out += line("%-16s %-17s %8s | %11s %11s %6s | %11s %11s %6s | %11s %11s | %7s %9s %9s | %-14s | %s%s\n",
                  r.rung.name.c_str(), r.rung.strategy.id().c_str(), batchOf(r.rung).c_str(), pDev.c_str(), "-",
                  "", pStates.c_str(), "-", "", "-", "-", "-", "-", "-", "-", statusName(r.status).c_str(),
                  r.note.empty() ? "" : (" (" + firstLine(r.note) + ")").c_str());
      continue;
    }
    const Check* dev = findCheck(r.agreement, "device peak");
    const Check* states = findCheck(r.agreement, "model states, device");
    ZRT_ENFORCE(dev && states, "a rung that ran has both device checks");
    char step[32], compute[32], tps[32];
    std::snprintf(step, sizeof step, "%.4f", r.stepSeconds());
    std::snprintf(compute, sizeof compute, "%.4f", r.computeSeconds());
    std::snprintf(tps, sizeof tps, "%.0f", r.tokensPerSecond(s));
    out += line("%-16s %-17s %8s | %11s %11s %6s | %11s %11s %6s | %11s %11s | %7s %9s %9s | %-14s | %s\n",
                r.rung.name.c_str(), r.rung.strategy.id().c_str(), batchOf(r.rung).c_str(), pDev.c_str(),
                formatBytes(r.measured.devicePeak()).c_str(), formatDifference(dev->difference).c_str(),
                pStates.c_str(), formatBytes(states->measured).c_str(),
                formatDifference(states->difference).c_str(), formatBytes(r.measured.hostPeak()).c_str(),
                formatBytes(r.measured.nvmePeak()).c_str(), step, compute, tps, fitsCell(r, budget).c_str(),
                r.agreement.ok() ? "ok" : ("DISAGREE: " + r.agreement.summary()).c_str());
  }
  out += line("\nAgreement: model states within %.0f%% in every place (device, host, NVMe), device peak within "
              "%.0f%%. step s: median step time after the first step; compute s: the part of it in the model's forward "
              "and backward (recomputation included); tokens/s: global batch x T / step s.\n",
              res.tolerances.modelStates * 100, res.tolerances.overall * 100);
  int ran = 0, agree = 0;
  for (const RungResult& r : res.rungs) {
    if (!r.ran()) continue;
    ++ran;
    if (r.agreement.ok()) ++agree;
  }
  out += line("%d of %zu rungs ran; prediction and measurement agree on %d of them.\n", ran, res.rungs.size(),
              agree);
  return out;
}

std::string formatDetail(const LadderResult& res) {
  std::string out = "Per rung, each ledger cell either side has (plan, ledger, diff):\n";
  for (const RungResult& r : res.rungs) {
    out += line("%s (%s, %s)%s\n", r.rung.name.c_str(), r.rung.strategy.id().c_str(), batchOf(r.rung).c_str(),
                r.ran() ? "" : " - did not run: plan only");
    for (int t = 0; t < kNumMemTags; ++t)
      for (int p = 0; p < kNumMemPlaces; ++p) {
        const auto tag = static_cast<MemTag>(t);
        const auto place = static_cast<MemPlace>(p);
        const std::uint64_t plan = r.prediction.bytes.get(tag, place);
        const std::uint64_t meas = r.ran() ? r.measured.peaks.get(tag, place) : 0;
        if (!plan && !meas) continue;
        const std::string cell = std::string(nameOf(tag)) + ", " + std::string(nameOf(place));
        out += line("  %-34s %12s %12s %6s\n", cell.c_str(), formatBytes(plan).c_str(),
                    r.ran() ? formatBytes(meas).c_str() : "-",
                    r.ran() ? formatDifference(relativeDifference(plan, meas)).c_str() : "");
      }
  }
  return out;
}

nlohmann::json toJson(const LadderResult& res) {
  const LadderSpec& s = res.spec;
  nlohmann::json j;
  j["model"] = {{"layers", s.model.layers}, {"hidden", s.model.hidden}, {"heads", s.model.heads},
                {"seq_len", s.model.seqLen}, {"vocab", 256},
                {"parameters", gpt2PlanModel(s.model).totalParams()}};
  j["ranks"] = s.ranks;
  j["budget_bytes"] = s.budgetBytes;
  j["steps"] = res.steps;
  j["trainer"] = res.trainer;
  j["tolerances"] = {{"model_states", res.tolerances.modelStates}, {"overall", res.tolerances.overall}};
  j["lora"] = {{"rank", s.lora.rank}, {"alpha", s.lora.alpha}, {"targets", s.lora.targets}};
  nlohmann::json rungs = nlohmann::json::array();
  for (const RungResult& r : res.rungs) {
    const plan::Strategy& st = r.rung.strategy;
    nlohmann::json o;
    o["name"] = r.rung.name;
    o["id"] = st.id();
    o["status"] = statusName(r.status);
    o["note"] = r.note;
    o["command"] = r.command;
    o["stage"] = st.stage;
    o["offload_optimizer"] = std::string(nameOf(st.offloadOptimizer));
    o["offload_param"] = std::string(nameOf(st.offloadParam));
    o["activation_checkpointing"] = st.checkpointing;
    o["lora"] = st.lora;
    o["micro_batch"] = st.microBatch;
    o["gradient_accumulation_steps"] = st.gradAccum;
    o["global_batch"] = r.rung.globalBatch(s.ranks);
    const MemoryBytes& pb = r.prediction.bytes;
    o["predicted"] = {{"device_peak", r.prediction.devicePeak()},
                      {"model_states_device", pb.modelStates(MemPlace::Device)},
                      {"host", pb.host()},
                      {"nvme", pb.total(MemPlace::Nvme)},
                      {"trainable_parameters", r.prediction.trainable},
                      {"frozen_parameters", r.prediction.frozen},
                      {"cells", cellsJson(pb)}};
    o["predicted_fits"] = r.predictedFits(s.budgetBytes);
    if (r.ran()) {
      const MemoryBytes& mb = r.measured.peaks;
      o["measured"] = {{"device_peak", r.measured.devicePeak()},
                       {"model_states_device", mb.modelStates(MemPlace::Device)},
                       {"host", r.measured.hostPeak()},
                       {"nvme", r.measured.nvmePeak()},
                       {"cells", cellsJson(mb)}};
      nlohmann::json checks = nlohmann::json::array();
      for (const Check& c : r.agreement.checks)
        checks.push_back({{"what", c.what},
                          {"predicted", c.predicted},
                          {"measured", c.measured},
                          {"difference", finiteOrNull(c.difference)},
                          {"tolerance", c.tolerance},
                          {"ok", c.ok()}});
      o["checks"] = checks;
      o["agree"] = r.agreement.ok();
      o["agreement"] = r.agreement.summary();
      o["step_seconds"] = r.stepSeconds();
      o["step_seconds_all"] = r.steps.seconds;
      o["compute_seconds"] = r.computeSeconds();
      o["tokens_per_second"] = r.tokensPerSecond(s);
      o["fits"] = r.fits(s.budgetBytes);
    }
    rungs.push_back(std::move(o));
  }
  j["rungs"] = std::move(rungs);
  return j;
}

}  // namespace zrt::ladder
