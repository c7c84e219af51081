// Reading a DeepSpeed config (--config) into zrt-plan's inputs: the baseline strategy (stage,
// offload, precision, optimizer, batch sizes) and the buffer settings (bucket sizes, stage 3
// limits, offload buffers, pin_memory). Flags given on the command line win over the file.
// Thread-safety: plain functions.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tools/plan/strategy.h"

namespace zrt::plan {

// Which settings the command line gave explicitly (they are not taken from the config).
struct GivenFlags {
  bool precision = false;
  bool optimizer = false;
  bool momentum = false;
  bool microBatch = false;
  bool gradAccum = false;
  bool stage = false;
  bool offloadOptimizer = false;
  bool offloadParam = false;
  bool pinMemory = false;
};

// Loads `file` with zrt::loadConfig (the same reader the Engine uses) for in.hardware.worldSize
// ranks and applies it to `in`; returns the file's JSON as written, for --write-config to start
// from. Throws ConfigError/InvalidArgument naming the file and key.
nlohmann::json applyConfigFile(const std::filesystem::path& file, const GivenFlags& given,
                               PlanInputs& in, double& momentum);

}  // namespace zrt::plan
