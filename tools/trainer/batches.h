// Which bytes of the text each rank trains on: the deterministic sample order of issue 16, as
// pure functions. With T the sequence length, G the global batch and N the bytes of the split,
// sample j of step s (j = 0..G-1) starts at byte ((s*G + j)*T) mod (N - T - 1); its input is the
// T bytes from there and its target the T bytes one further. Rank r in micro-step m takes
// j = m*(micro*W) + r*micro + b, b = 0..micro-1. The order depends on (s, j) only, so a run on
// any world size and any split of G into micro-batches and accumulation steps sees the same
// global batch each step: what lets a 2-rank run be checked against a 1-rank run.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace zrt::trainer {

// How a global batch is split: G = micro * accumulation * world.
struct BatchSplit {
  std::int64_t micro = 1;
  std::int64_t accumulation = 1;
  std::int64_t world = 1;
  std::int64_t global() const { return micro * accumulation * world; }
};

// Bytes a split of `bytes` bytes leaves for sample starts (N - T - 1); at most 0 when the split
// is too short for one sample.
std::int64_t sampleRange(std::int64_t bytes, int seqLen);

// First byte of sample j of step s. Requires sampleRange(bytes, seqLen) > 0.
std::int64_t sampleStart(std::int64_t step, std::int64_t j, std::int64_t global, int seqLen,
                         std::int64_t bytes);

// The global index j of the b-th sample rank `rank` takes in micro-step `microStep`.
std::int64_t sampleIndex(std::int64_t microStep, std::int64_t rank, std::int64_t b,
                         const BatchSplit& split);

// Fills inputs and targets (split.micro x seqLen bytes each, sample-major) with the micro-batch
// rank `rank` takes in micro-step `microStep` of step `step`, from `data` (one split of the text).
void fillMicroBatch(std::span<const std::uint8_t> data, int seqLen, const BatchSplit& split,
                    std::int64_t step, std::int64_t microStep, std::int64_t rank,
                    std::uint8_t* inputs, std::uint8_t* targets);

}  // namespace zrt::trainer
