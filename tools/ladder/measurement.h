// What one zrt-train run measured, read from its --json-log file: the step lines (step_s,
// compute_s) and the last line, rank 0's memory ledger in exact bytes (tools/trainer/step_log.h,
// memoryJson: per tag and place current and peak, and per place the peak of the sum).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/ladder/memory_bytes.h"

namespace zrt::ladder {

struct LedgerReading {
  MemoryBytes peaks;                                 // each (tag, place) cell's peak
  std::array<std::uint64_t, kNumMemPlaces> placePeak{};  // the total row: the peak of the sum
  std::uint64_t devicePeak() const { return placePeak[static_cast<int>(MemPlace::Device)]; }
  std::uint64_t hostPeak() const {
    return placePeak[static_cast<int>(MemPlace::PinnedHost)] + placePeak[static_cast<int>(MemPlace::Host)];
  }
  std::uint64_t nvmePeak() const { return placePeak[static_cast<int>(MemPlace::Nvme)]; }
};

// The memory ledger from the --json-log file's text: its last line, {"memory": {"<tag>":
// {"<place>": {"current": N, "peak": N}}}, "total": {"<place>": {...}}}, tags and places by the
// names nameOf() gives them. Throws InvalidArgument, naming the line or the missing tag, place or
// count, when the last line is not such an object (a run that ended before writing it).
LedgerReading parseMemoryLine(const std::string& text);

struct StepTimes {
  std::vector<double> seconds;  // step_s of each step line, in order
  std::vector<double> compute;  // compute_s (the model's forward and backward), when logged
  // The median of the steps after the first (the first allocates, faults pages in and records
  // stage 3's trace), or of all when there is one.
  double typical() const { return typicalOf(seconds); }
  double typicalCompute() const { return typicalOf(compute); }
  static double typicalOf(const std::vector<double>& values);
};

// The --json-log file's text: one JSON object per line with "step_s" (and "compute_s", read
// when present), the last line the memory ledger (skipped here). Throws InvalidArgument naming
// the line for a line that is neither, or when there is no step.
StepTimes parseStepLog(const std::string& text);

}  // namespace zrt::ladder
