// Running the ladder: for each rung, its config written into the work directory, zrt-plan's
// prediction for it, a few real steps of zrt-train (under mpirun for more than one rank), the
// ledger and step times read back, and the comparison. A rung whose lever the trainer does not
// have (it is asked with --help before anything runs) is listed as not available, not failed.
// Thread-safety: one thread; it starts child processes.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/ladder/ladder_result.h"
#include "tools/ladder/svg_chart.h"

namespace zrt::ladder {

struct RunnerOptions {
  std::string trainer;              // zrt-train
  std::vector<std::string> mpirun;  // the launcher up to (not including) "-np N"
  int steps = 5;
  std::string data;            // --data for the trainer; empty: its default
  std::string deviceMem;       // the simulated device's capacity for every run (--device-mem)
  std::filesystem::path workDir;  // configs, trainer output and step logs
  nlohmann::json baseConfig;
  std::chrono::seconds timeout{600};  // per rung
  std::function<void(const std::string&)> progress;  // one line as each rung starts and ends
};

// Whether `trainer --help` lists `flag` (e.g. "--lora-rank"). Throws Error naming the command
// when the trainer cannot be run or its help exits non-zero.
bool trainerHasFlag(const std::string& trainer, const std::string& flag, const std::filesystem::path& workDir);

// Throws Error when interrupted (SIGINT/SIGTERM), after ending the rung's processes.
LadderResult runLadder(const LadderSpec& spec, const RunnerOptions& options);

// The chart's rows: each rung's measured device bytes by part, the plan's peak, the step time.
std::vector<ChartBar> chartBars(const LadderResult& result);

}  // namespace zrt::ladder
