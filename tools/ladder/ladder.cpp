#include "tools/ladder/ladder.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tools/ladder/child_process.h"

namespace zrt::ladder {

namespace {

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) ZRT_THROW(IoError, "cannot write ", p.string());
}

// The last `n` lines of a trainer's output, for a failure's message.
std::string tail(const std::string& text, int n) {
  std::size_t pos = text.size();
  if (pos && text[pos - 1] == '\n') --pos;
  for (int i = 0; i < n && pos != std::string::npos && pos > 0; ++i) pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

constexpr const char* kLoraFlag = "--lora-rank";

}  // namespace

bool trainerHasFlag(const std::string& trainer, const std::string& flag, const std::filesystem::path& workDir) {
  const std::vector<std::string> argv = {trainer, "--help"};
  const std::filesystem::path out = workDir / "trainer-help.txt";
  ChildProcess child(argv, out.string());
  const ProcessResult r = child.wait(std::chrono::seconds(60));
  if (r.interrupted) ZRT_THROW(Error, "interrupted");
  const std::string text = readFile(out);
  if (!r.ok()) ZRT_THROW(Error, "`", commandLine(argv), "` failed (", r.describe(), "):\n", tail(text, 20));
  // A flag in CLI11's help starts a line after spaces and a comma-separated short form.
  return text.find(flag + " ") != std::string::npos || text.find(flag + "\n") != std::string::npos ||
         text.find(flag + ",") != std::string::npos;
}

LadderResult runLadder(const LadderSpec& spec, const RunnerOptions& o) {
  LadderResult result;
  result.spec = spec;
  result.steps = o.steps;
  result.trainer = o.trainer;
  const std::vector<Rung> rungs = ladderRungs(spec);
  // Decided before any rung runs: a trainer without LoRA lists the rung as not available.
  bool loraAvailable = false;
  for (const Rung& rung : rungs)
    if (rung.strategy.lora) loraAvailable = trainerHasFlag(o.trainer, kLoraFlag, o.workDir);
  int index = 0;
  for (const Rung& rung : rungs) {
    ++index;
    char stem[64];
    std::snprintf(stem, sizeof stem, "%02d-%s", index, rung.strategy.id().c_str());
    const std::filesystem::path config = o.workDir / (std::string(stem) + ".json");
    writeFile(config, rungConfig(o.baseConfig, spec, rung).dump(2) + "\n");
    RungResult r;
    r.rung = rung;
    r.prediction = predict(spec, rung, config);
    RunFiles files;
    files.config = config.string();
    files.jsonLog = (o.workDir / (std::string(stem) + ".jsonl")).string();
    files.deviceMem = o.deviceMem;
    files.data = o.data;
    std::vector<std::string> argv;
    if (spec.ranks > 1) {
      argv = o.mpirun;
      argv.push_back("-np");
      argv.push_back(std::to_string(spec.ranks));
    }
    argv.push_back(o.trainer);
    for (std::string& a : trainerArgs(spec, rung, files, o.steps)) argv.push_back(std::move(a));
    r.command = commandLine(argv);

    if (rung.strategy.lora && !loraAvailable) {
      r.status = RungStatus::NotAvailable;
      r.note = std::string("zrt-train has no ") + kLoraFlag;
      if (o.progress) o.progress(rung.name + ": not available (" + r.note + ")");
      result.rungs.push_back(std::move(r));
      continue;
    }

    if (o.progress) o.progress(rung.name + " (" + rung.strategy.id() + "): " + r.command);
    const std::filesystem::path outFile = o.workDir / (std::string(stem) + ".out");
    ProcessResult pr;
    {
      ChildProcess child(argv, outFile.string());
      pr = child.wait(o.timeout);
    }
    if (pr.interrupted) ZRT_THROW(Error, "interrupted while running ", rung.name);
    const std::string output = readFile(outFile);
    if (!pr.ok()) {
      r.status = RungStatus::Failed;
      r.note = detail::cat("zrt-train ", pr.describe(), "; its output's last lines:\n", tail(output, 15));
    } else {
      try {
        const std::string log = readFile(files.jsonLog);
        r.measured = parseMemoryLine(log);
        r.steps = parseStepLog(log);
        r.agreement = compare(r.prediction.bytes, r.prediction.devicePeak(), r.measured, result.tolerances);
        r.status = RungStatus::Ran;
      } catch (const std::exception& e) {
        r.status = RungStatus::Failed;
        r.note = detail::cat("reading ", files.jsonLog, ": ", e.what());
      }
    }
    if (o.progress) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f s", pr.seconds);
      o.progress("  " + std::string(r.ran() ? "ran" : "FAILED") + " in " + buf +
                 (r.ran() ? "" : ": " + r.note));
    }
    result.rungs.push_back(std::move(r));
  }
  return result;
}

std::vector<ChartBar> chartBars(const LadderResult& res) {
  std::vector<ChartBar> bars;
  for (const RungResult& r : res.rungs) {
    ChartBar b;
    b.label = detail::cat(r.rung.name, " (", r.rung.strategy.id(), ", ", r.rung.strategy.microBatch, " x ",
                          r.rung.strategy.gradAccum, ")");
    b.ran = r.ran();
    b.predicted = r.prediction.devicePeak();
    if (r.ran()) {
      b.parts = chartParts(r.measured.peaks, MemPlace::Device);
      b.stepSeconds = r.stepSeconds();
    } else {
      b.note = r.status == RungStatus::NotAvailable ? "not available (" + r.note + ")" : "failed";
    }
    bars.push_back(std::move(b));
  }
  return bars;
}

}  // namespace zrt::ladder
