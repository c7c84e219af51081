// Candidate strategies, their evaluation (bytes per rank by purpose and place, whether they
// fit, the estimated step time) and the recommendation rule: the first lever, in the order
// no change, accumulation, activation checkpointing, ZeRO stage 1/2, stage 3, CPU offload, NVMe
// offload, adapters, that makes some strategy fit; within it the smallest estimated slowdown.
// Pure functions over plain data; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/plan/formulas.h"
#include "tools/plan/inputs.h"
#include "tools/plan/model_spec.h"

namespace zrt::plan {

// Activations as a known program allocates them, in place of Korthikanti et al.'s estimate:
// bytes by place (MemPlace order) for a strategy. zrt-ladder gives zrt-train's
// (tools/trainer/model/gpt2.h, gpt2ActivationBytes), which keeps fp32 activations and backward
// scratch of its own whatever the precision and checkpointing.
struct ActivationModel {
  std::string name;  // what the report says the figures come from
  std::function<std::array<std::uint64_t, kNumMemPlaces>(const Strategy&)> bytes;
};

struct PlanInputs {
  ModelSpec model;                     // full fine-tuning
  std::optional<ModelSpec> loraModel;  // the adapter variant, when LoRA is considered
  Hardware hardware;
  Training training;
  Strategy baseline;  // "no change": what the user runs now
  std::optional<ActivationModel> activationModel;
};

struct Evaluation {
  Strategy strategy;
  ModelStatePlacement placement;  // where each model state lives (partition/placement.h)
  const Padded& padded() const { return placement.padded; }
  std::uint64_t k() const { return optimizerBytesPerParam(placement.optimizer); }  // ZeRO's K
  std::uint64_t trainable = 0, frozen = 0;
  bool activationsKnown = false;
  std::uint64_t largestReduceBucket = 0;  // elements, stages 2-3 (for --explain)
  PlanLedger ledger;
  bool fitsDevice = false, fitsHost = false, fitsNvme = false;
  bool fits() const { return fitsDevice && fitsHost && fitsNvme; }
  std::vector<std::string> problems;  // why it does not fit
  StepTime time;
};

// The ledger, fit and step time of one strategy.
Evaluation evaluate(const PlanInputs& in, const Strategy& s);

// "12.35 GB" (GB = 1e9 bytes, as the ZeRO paper counts); zrt-plan's unit in every message.
std::string gigabytes(std::uint64_t bytes);

// Lever levels in preference order; a strategy's level is the highest lever it pulls.
enum Lever : int {
  kNoChange = 0,
  kAccumulation,
  kCheckpointing,
  kStage12,
  kStage3,
  kCpuOffload,
  kNvmeOffload,
  kAdapters,
};
std::string_view leverName(int level);
// The highest lever `s` changes relative to `baseline`, micro-batch aside; 0 only for the
// baseline's own settings.
int leverLevel(const Strategy& baseline, const Strategy& s);

struct Candidate {
  Evaluation given;                   // at the baseline's micro-batch
  std::optional<Evaluation> fitting;  // at the largest divisor of it that fits, if any
  int level = 0;                      // levers pulled to reach `fitting`
  double slowdown = 0;                // fitting's step time / baseline's - 1
};

struct Plan {
  PlanInputs inputs;
  Evaluation baseline;
  std::vector<Candidate> candidates;
  std::optional<std::size_t> recommended;
};

// Every strategy the table shows: stage 0-3 x offload (none; the optimizer to cpu from stage 1;
// at stage 3 also the optimizer to nvme, and the parameters with it to cpu or nvme) x
// checkpointing (when
// activations can be estimated) x adapters (when LoRA is considered), plus the baseline.
std::vector<Strategy> candidateStrategies(const PlanInputs& in);

// The largest micro-batch makePlan() takes (InvalidArgument above it): far above what any device
// holds, and small enough that trying each of its divisors stays instant.
inline constexpr std::uint64_t kMaxMicroBatch = std::uint64_t{1} << 24;

// Every divisor of n >= 1, largest first (the micro-batches that keep the global batch exact).
std::vector<std::uint64_t> divisorsDescending(std::uint64_t n);

Plan makePlan(const PlanInputs& in);

}  // namespace zrt::plan
