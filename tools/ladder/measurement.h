// What one zrt-train run measured, read from what it writes today: rank 0's memory ledger table,
// printed at the end of the run (core/memory_ledger.h's table(): per tag and place "current /
// peak", and a total row whose peak is the peak of the sum), and the --json-log step lines
// (step_s). The table prints sizes with three significant digits ("3.18 MiB"), so a parsed value
// is within half a unit of the last digit of the true one: 0.5% at worst (at "1.00"), well inside
// the 5% and 15% the ladder checks.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

// "0 B", "512 B", "3.18 MiB", "1.00 GiB" (core/units.h formatBytes) to bytes. Throws
// InvalidArgument quoting the text.
std::uint64_t parsePrintedBytes(std::string_view text);

// The last memory ledger table in `output` (the trainer's stdout and stderr). Throws
// InvalidArgument when there is none, or a row or cell cannot be read (quoting the line).
LedgerReading parseLedgerTable(const std::string& output);

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
// when present). Throws InvalidArgument naming the line for a line that is not such an object,
// or when there is no step.
StepTimes parseStepLog(const std::string& text);

}  // namespace zrt::ladder
