// What a ladder run found, rung by rung: the prediction, what the run measured (or why it did
// not run), and whether they agree. Plain data the table, the JSON and the chart are made from.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/ladder/comparison.h"
#include "tools/ladder/measurement.h"
#include "tools/ladder/prediction.h"
#include "tools/ladder/rungs.h"

namespace zrt::ladder {

enum class RungStatus {
  Ran,
  Failed,        // the trainer exited non-zero, timed out, or its output could not be read
  NotAvailable,  // the trainer lacks a lever the rung needs (note says which)
};

struct RungResult {
  Rung rung;
  RungStatus status = RungStatus::NotAvailable;
  std::string note;     // why it failed or is not available
  std::string command;  // the trainer's command line
  Prediction prediction;
  LedgerReading measured;  // when it ran
  StepTimes steps;         // when it ran
  Agreement agreement;     // when it ran

  bool ran() const { return status == RungStatus::Ran; }
  double stepSeconds() const { return steps.typical(); }
  double computeSeconds() const { return steps.typicalCompute(); }
  // Tokens of one global batch over the typical step time.
  double tokensPerSecond(const LadderSpec& spec) const;
  bool fits(std::uint64_t budget) const { return measured.devicePeak() <= budget; }
  bool predictedFits(std::uint64_t budget) const { return prediction.devicePeak() <= budget; }
};

struct LadderResult {
  LadderSpec spec;
  int steps = 0;
  std::string trainer;
  Tolerances tolerances;
  std::vector<RungResult> rungs;
  bool allAgree() const;  // every rung that ran
  bool allRan() const;    // every rung that was available
};

}  // namespace zrt::ladder
