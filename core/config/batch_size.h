// Batch-size resolution as DeepSpeed does it: train_batch_size = train_micro_batch_size_per_gpu
// * gradient_accumulation_steps * world size; any two determine the third (rounding down, as
// DeepSpeed does, and then checking), one alone implies no accumulation. Values the file leaves
// "auto" or absent come from the caller (a trainer's flags); with neither a train batch nor a
// micro-batch known, ZRT takes a micro-batch of 1 where DeepSpeed stops with an error.
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zrt {

// One batch setting as the file and the caller give it.
struct BatchSetting {
  std::optional<std::int64_t> file;    // a number in the file
  bool fileAuto = false;               // the file says "auto"
  std::optional<std::int64_t> caller;  // the caller's value, used when the file has no number
};

struct BatchRequest {
  BatchSetting train;  // train_batch_size
  BatchSetting micro;  // train_micro_batch_size_per_gpu
  BatchSetting accum;  // gradient_accumulation_steps
};

struct BatchSizes {
  std::int64_t train = 1;
  std::int64_t micro = 1;
  std::int64_t accum = 1;
  std::vector<std::string> notes;  // where each value came from, for the start-up printout
};

// Throws ConfigError naming `source` when the values contradict each other (the message gives
// all three and the world size), when a derived value would be below 1, or when the caller asks
// for a value other than the number the file gives.
BatchSizes resolveBatchSizes(const BatchRequest& request, int worldSize, const std::string& source);

}  // namespace zrt
