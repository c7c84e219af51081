// What zrt-train reports per step, as plain data, and its two renderings: the printed line (a
// progress line with ETA rewritten in place on a terminal, plain lines otherwise) and the JSON
// line of --json-log; and the log's last line, rank 0's memory ledger in exact bytes. Kept apart
// from the loop so the formats are tested on their own.
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/memory_ledger.h"

namespace zrt::trainer {

struct StepRecord {
  std::int64_t step = 0;   // 1-based: the optimizer steps taken or skipped so far
  std::int64_t steps = 0;  // of the run
  double loss = 0;         // mean cross-entropy over the global batch (nats per byte)
  std::optional<double> valLoss;  // when this step was followed by a validation
  double tokensPerSecond = 0;
  bool skipped = false;  // the optimizer step was skipped (fp16 overflow)
  double lr = 0;
  double lossScale = 1;
  double gradNorm = 0;
  double stepSeconds = 0;  // wall time of the step on rank 0, validation excluded
  double computeSeconds = 0;
  double commSeconds = 0;
  double optimizerSeconds = 0;
  double ioSeconds = 0;  // of the optimizer: waiting on NVMe (offload_optimizer nvme)
  double etaSeconds = 0;
};

// "step 12/200 loss 3.2145 val 3.3012 | 2034 tok/s | scale 1 | grad norm 0.841 | lr 1.00e-03 |
// 0.952 s: compute 0.801 comm 0.050 optimizer 0.101 io 0.000", plus " | eta 3m12s" when
// `withEta`, and " (skipped)" for a skipped step.
std::string formatStepLine(const StepRecord& r, bool withEta);

// One JSON object on one line: step, loss, val_loss (only when evaluated), tokens_per_s, skipped,
// lr, loss_scale, grad_norm, step_s, compute_s, comm_s, optimizer_s, io_s.
std::string stepJson(const StepRecord& r);

// The ledger as one JSON line, in bytes, every tag and place by the names nameOf() gives them:
// {"memory": {"<tag>": {"<place>": {"current": N, "peak": N}}}, "total": {"<place>": {"current":
// N, "peak": N}}}; a total's peak is the peak of the place's sum (MemoryLedger::total). zrt-train
// writes it after the last step line of --json-log; zrt-ladder reads it.
std::string memoryJson(const MemoryLedger& ledger);

// "45s", "3m12s", "2h05m".
std::string formatDuration(double seconds);

}  // namespace zrt::trainer
