// zrt-ladder: the memory ladder of a model, measured. For each lever in turn (a smaller
// micro-batch with accumulation, activation checkpointing, ZeRO stages 1-3, CPU and NVMe
// offload, LoRA) it runs a few real steps of zrt-train and prints zrt-plan's prediction beside
// the ledger's measurement, step time and tokens/s, and whether the rung fits the budget.
//   zrt-ladder --device-mem 16M --ranks 2 --svg ladder.svg
// docs/tuning.md explains the levers and walks through the reference model's ladder.
// Exit status: 0 every available rung ran; 1 a rung failed (or, with --require-agreement, a
// prediction disagreed); 2 bad input, naming the flag or file; 130 interrupted.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/config/json_text.h"
#include "core/error.h"
#include "core/units.h"
#include "tools/ladder/child_process.h"
#include "tools/ladder/ladder.h"
#include "tools/ladder/report.h"
#include "tools/ladder/svg_chart.h"

namespace {

namespace fs = std::filesystem;
using namespace zrt;
using namespace zrt::ladder;

// The work directory: a private one under $TMPDIR, removed at exit unless kept or given.
class WorkDir {
 public:
  WorkDir(const std::string& given, bool keep) {
    if (!given.empty()) {
      path_ = given;
      keep_ = true;
      std::error_code ec;
      fs::create_directories(path_, ec);
      if (ec) ZRT_THROW(InvalidArgument, "--work-dir ", given, ": cannot create: ", ec.message());
      return;
    }
    std::string pattern = (fs::temp_directory_path() / "zrt-ladder-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) ZRT_THROW(IoError, "cannot create a directory like ", pattern);
    path_ = pattern;
    keep_ = keep;
  }
  ~WorkDir() {
    if (keep_ || path_.empty()) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const fs::path& path() const { return path_; }
  bool kept() const { return keep_; }

 private:
  fs::path path_;
  bool keep_ = false;
};

std::vector<std::string> splitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, ',')) items.push_back(item);
  return items;
}

// zrt-train beside this program (an install's bin/) or in the build tree's tools/trainer/.
std::string findTrainer() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  for (const fs::path& p : {self.parent_path() / "zrt-train", self.parent_path() / ".." / "trainer" / "zrt-train"})
    if (fs::exists(p)) return fs::weakly_canonical(p).string();
  return {};
}

std::uint64_t physicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(size) : 0;
}

void writeText(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) ZRT_THROW(IoError, flag, " ", path, ": cannot write");
}

struct Flags {
  LadderSpec spec;
  std::string budget, precision, trainer, mpirun, data, nvmePath, baseConfig, workDir, runDeviceMem;
  std::string loraTargets = "qkv,proj,fc,mlp_proj";
  std::string json, svg;
  int steps = 5;
  int timeout = 600;
  bool keepWorkDir = false, detail = false, requireAgreement = false;
};

int run(int argc, char** argv) {
  Flags f;
  LadderSpec& s = f.spec;
  CLI::App app{"zrt-ladder: what each memory lever saves and costs on your model, measured with zrt-train "
               "and checked against zrt-plan (docs/tuning.md)"};
  app.add_option("--layers", s.model.layers, "transformer blocks")->check(CLI::Range(1, 1024));
  app.add_option("--hidden", s.model.hidden, "model width")->check(CLI::Range(1, 65536));
  app.add_option("--heads", s.model.heads, "attention heads (must divide --hidden)")->check(CLI::Range(1, 65536));
  app.add_option("--seq-len", s.model.seqLen, "sequence length T")->check(CLI::Range(1, 1 << 20));
  app.add_option("--micro-batch", s.microBatch, "the baseline's micro-batch per rank")->check(CLI::Range(1, 1 << 20));
  app.add_option("--grad-accum", s.gradAccum, "the baseline's accumulation steps")->check(CLI::Range(1, 1 << 20));
  app.add_option("--small-micro-batch", s.smallMicroBatch,
                 "the micro-batch from the accumulation rung on (divides --micro-batch)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--ranks", s.ranks, "ranks every rung runs on (mpirun -np)")->check(CLI::Range(1, 4096));
  app.add_option("--device-mem", f.budget, "the device-memory budget per rank each rung is judged against (e.g. 16M)")
      ->required();
  app.add_option("--precision", f.precision, "fp32, fp16 or bf16 (default: the base config's)");
  app.add_option("--steps", f.steps, "optimizer steps per rung")->check(CLI::Range(1, 100000));
  app.add_option("--trainer", f.trainer, "zrt-train (default: beside zrt-ladder, or the build tree's)");
  app.add_option("--mpirun", f.mpirun,
                 "launcher before '-np N' (default: mpirun --oversubscribe --bind-to none, "
                 "--allow-run-as-root as root)");
  app.add_option("--data", f.data, "text file the trainer reads (default: the trainer's)");
  app.add_option("--nvme-path", f.nvmePath, "directory for the NVMe rung's swap files (default: the work directory)");
  app.add_option("--base-config", f.baseConfig, "DeepSpeed config every rung starts from (default: built in)");
  app.add_option("--run-device-mem", f.runDeviceMem,
                 "capacity of the simulated device in every run (default: physical memory / ranks), so a rung "
                 "over the budget still runs and is measured");
  app.add_option("--lora-rank", s.lora.rank, "adapter rank of the LoRA rung")->check(CLI::Range(1, 65536));
  app.add_option("--lora-alpha", s.lora.alpha, "adapter alpha of the LoRA rung")->check(CLI::PositiveNumber);
  app.add_option("--lora-targets", f.loraTargets, "adapted layers of the LoRA rung: qkv, proj, fc, mlp_proj");
  app.add_option("--work-dir", f.workDir, "keep configs, trainer output and step logs here");
  app.add_flag("--keep-work-dir", f.keepWorkDir, "do not remove the temporary work directory");
  app.add_option("--timeout", f.timeout, "seconds one rung may run")->check(CLI::Range(1, 86400));
  app.add_option("--json", f.json, "write the results as JSON to this file");
  app.add_option("--svg", f.svg, "draw the ladder as an SVG bar chart in this file");
  app.add_flag("--detail", f.detail, "also print every ledger cell, plan against ledger");
  app.add_flag("--require-agreement", f.requireAgreement, "exit 1 when a prediction disagrees with its measurement");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  RunnerOptions o;
  std::unique_ptr<WorkDir> work;
  try {
    s.budgetBytes = parseBytes(f.budget, "--device-mem");
    s.precision = f.precision;
    s.lora.targets = splitList(f.loraTargets);
    if (s.model.hidden % s.model.heads != 0)
      ZRT_THROW(InvalidArgument, "--heads ", s.model.heads, " must divide --hidden ", s.model.hidden);
    checkSpec(s);
    gpt2LoraPlanModel(s.model, s.lora);  // names an unknown --lora-targets (or a bad rank) now
    o.trainer = f.trainer.empty() ? findTrainer() : f.trainer;
    if (o.trainer.empty())
      ZRT_THROW(InvalidArgument, "zrt-train is not beside zrt-ladder nor in the build tree: give --trainer");
    if (!fs::exists(o.trainer)) ZRT_THROW(InvalidArgument, "--trainer ", o.trainer, ": no such file");
    if (!f.data.empty() && !fs::exists(f.data)) ZRT_THROW(InvalidArgument, "--data ", f.data, ": no such file");
    o.mpirun = f.mpirun.empty() ? std::vector<std::string>{"mpirun", "--oversubscribe", "--bind-to", "none"}
                                : splitWords(f.mpirun);
    if (f.mpirun.empty() && ::geteuid() == 0) o.mpirun.push_back("--allow-run-as-root");
    if (f.baseConfig.empty()) {
      o.baseConfig = defaultBaseConfig();
    } else {
      std::ifstream in(f.baseConfig, std::ios::binary);
      if (!in) ZRT_THROW(InvalidArgument, "--base-config ", f.baseConfig, ": cannot open");
      std::stringstream text;
      text << in.rdbuf();
      o.baseConfig = parseJsonText(text.str(), f.baseConfig);
      if (!o.baseConfig.is_object()) ZRT_THROW(InvalidArgument, "--base-config ", f.baseConfig, ": not a JSON object");
    }
    const std::uint64_t capacity = f.runDeviceMem.empty()
                                       ? physicalMemory() / static_cast<std::uint64_t>(s.ranks)
                                       : parseBytes(f.runDeviceMem, "--run-device-mem");
    o.deviceMem = std::to_string(capacity);
    work = std::make_unique<WorkDir>(f.workDir, f.keepWorkDir);
    s.nvmePath = f.nvmePath.empty() ? (work->path() / "nvme").string() : f.nvmePath;
    std::error_code ec;
    fs::create_directories(s.nvmePath, ec);
    if (ec || !fs::is_directory(s.nvmePath))
      ZRT_THROW(InvalidArgument, "--nvme-path ", s.nvmePath, ": not a directory that can be created");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-ladder: %s\n", e.what());
    return 2;
  }
  o.steps = f.steps;
  o.data = f.data;
  o.workDir = work->path();
  o.timeout = std::chrono::seconds(f.timeout);
  o.progress = [](const std::string& line) {
    std::fprintf(stderr, "zrt-ladder: %s\n", line.c_str());
    std::fflush(stderr);
  };

  installInterruptHandlers();
  LadderResult result;
  try {
    result = runLadder(s, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-ladder: %s\n", e.what());
    return interrupted() ? 130 : 1;
  }
  std::cout << formatTable(result);
  if (f.detail) std::cout << "\n" << formatDetail(result);
  for (const RungResult& r : result.rungs)
    if (r.status == RungStatus::Failed) std::cout << "\n" << r.rung.name << " failed: " << r.note << "\n";
  if (work->kept()) std::cout << "configs, trainer output and step logs: " << work->path().string() << "\n";
  std::cout << std::flush;
  try {
    if (!f.json.empty()) writeText(f.json, toJson(result).dump(2) + "\n", "--json");
    if (!f.svg.empty()) {
      const std::string title = detail::cat("zrt-ladder: GPT-2 ", s.model.layers, " x ", s.model.hidden, ", T ",
                                            s.model.seqLen, ", ", s.ranks, " rank(s), budget ",
                                            formatBytes(s.budgetBytes), " per rank");
      writeText(f.svg, ladderSvg(chartBars(result), s.budgetBytes, title), "--svg");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-ladder: %s\n", e.what());
    return 1;
  }
  if (!result.allRan()) return 1;
  if (f.requireAgreement && !result.allAgree()) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-ladder: %s\n", e.what());
    return 1;
  }
}
