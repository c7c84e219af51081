// The recommended strategy as a DeepSpeed-compatible JSON config (what --write-config writes and
// zrt::loadConfig reads back). Starts from the user's config when one was given, so keys the
// plan does not decide (optimizer parameters, scheduler, aio...) are kept as written.
// Pure function; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tools/plan/strategy.h"

namespace zrt::plan {

struct WriteConfigOptions {
  const nlohmann::json* base = nullptr;  // the user's config as read, or null
  std::string nvmePath = "/local_nvme";  // for NVMe offload when the base has none
  double momentum = 0.0;                 // SGD, when the base has no optimizer section
};

// Sets batch sizes (micro-batch, accumulation, train_batch_size = micro · accumulation · world
// size), fp16/bf16, the optimizer type when the base has none, and zero_optimization: stage,
// bucket sizes, offload_optimizer and offload_param (device, pin_memory, nvme_path).
nlohmann::json strategyConfig(const Plan& plan, const Evaluation& chosen,
                              const WriteConfigOptions& options);

}  // namespace zrt::plan
