#include "partition/stage_rules.h"

#include "core/error.h"

namespace zrt {

StageRules stageRules(int stage) {
  switch (stage) {
    case 0: return {false, false, false};
    case 1: return {true, false, false};
    case 2: return {true, true, false};
    case 3: return {true, true, true};
    default: break;
  }
  ZRT_THROW(InvalidArgument, "ZeRO stage ", stage, " does not exist: expected 0, 1, 2 or 3");
}

int partitionCount(int stage, int worldSize) {
  ZRT_ENFORCE_GE(worldSize, 1);
  return stageRules(stage).shardOptimizer ? worldSize : 1;
}

int partitionRank(int stage, int rank) { return stageRules(stage).shardOptimizer ? rank : 0; }

void validateOffload(int stage, OffloadDevice offloadOptimizer, OffloadDevice offloadParam) {
  stageRules(stage);
  // The config reader's rules, so an allocation and a config file can never disagree.
  if (auto breach = offloadRuleBreach(stage, offloadOptimizer, offloadParam)) {
    const OffloadDevice device =
        breach->section == "offload_param" ? offloadParam : offloadOptimizer;
    ZRT_THROW(InvalidArgument, breach->section, " device '", nameOf(device), "': ",
              breach->problem);
  }
}

bool offloadAllowed(int stage, OffloadDevice offloadOptimizer, OffloadDevice offloadParam) {
  return stage >= 0 && stage <= 3 && !offloadRuleBreach(stage, offloadOptimizer, offloadParam);
}

OptimizerStateSpec optimizerStateSpec(OptimizerType type, bool sgdMomentum, DType precision,
                                      bool optimizerOffloaded) {
  OptimizerStateSpec s;
  s.masterWeights = precision != DType::F32 || optimizerOffloaded;
  switch (type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW: s.moments = 2; break;
    case OptimizerType::SGD: s.moments = sgdMomentum ? 1 : 0; break;
  }
  return s;
}

std::uint64_t optimizerBytesPerParam(const OptimizerStateSpec& spec) {
  return 4u * (static_cast<std::uint64_t>(spec.masterWeights ? 1 : 0) +
               static_cast<std::uint64_t>(spec.moments));
}

}  // namespace zrt
