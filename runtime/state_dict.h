// The whole model by name, on every rank: each parameter gathered from the ranks' shards (stage
// 3) and converted to fp32, as DeepSpeed's consolidated state dict, for an evaluation, an export
// or a comparison in the caller's own code. Collective: every rank calls it at the same point,
// outside a micro-step. It gathers one module at a time (GatheredParameters), so it holds one
// module's gathered parameters beside the fp32 copies it returns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace zrt {

struct StateDictEntry {
  std::string name;  // "<module>.<param>", as checkpoints and loadWeights name it
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // the parameter in the training dtype, widened to fp32
};

// Every parameter (frozen ones too), in module and registration order.
std::vector<StateDictEntry> stateDict(Engine& engine);

}  // namespace zrt
