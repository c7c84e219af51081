#include "tools/plan/config_input.h"

#include <fstream>
#include <sstream>

#include "core/config/config.h"
#include "core/config/json_text.h"
#include "core/error.h"

namespace zrt::plan {

nlohmann::json applyConfigFile(const std::filesystem::path& file, const GivenFlags& given,
                               PlanInputs& in, double& momentum) {
  // The file is read as the Engine would read it; flags then replace what they give (as
  // overrides to the reader they would clash with numbers the file states).
  const Config c = loadConfig(file, in.hardware.worldSize);

  in.training.zero = c.zero_optimization;
  if (given.pinMemory) {
    in.training.zero.offload_optimizer.pin_memory = true;
    in.training.zero.offload_param.pin_memory = true;
  }
  if (!given.precision)
    in.training.precision = trainingPrecision(c);
  if (!given.optimizer && c.optimizer.present) in.training.optimizer = c.optimizer.type;
  if (!given.momentum && c.optimizer.present && c.optimizer.type == OptimizerType::SGD) {
    momentum = c.optimizer.momentum;
    in.training.sgdMomentum = momentum != 0.0;
  }
  if (!given.microBatch) in.baseline.microBatch = static_cast<std::uint64_t>(c.train_micro_batch_size_per_gpu);
  if (!given.gradAccum) in.baseline.gradAccum = static_cast<std::uint64_t>(c.gradient_accumulation_steps);
  if (!given.stage) in.baseline.stage = c.zero_optimization.stage;
  if (!given.offloadOptimizer) in.baseline.offloadOptimizer = c.zero_optimization.offload_optimizer.device;
  if (!given.offloadParam) in.baseline.offloadParam = c.zero_optimization.offload_param.device;

  // The JSON as written, through the config reader's own parser (comments allowed, as
  // loadConfig allows them; nlohmann's default parse refuses them).
  std::ifstream raw(file, std::ios::binary);
  std::stringstream text;
  text << raw.rdbuf();
  nlohmann::json j = parseJsonText(text.str(), file.string());
  // Absent, DeepSpeed's default depends on the stage, which the plan varies.
  if (j.contains("zero_optimization") && j["zero_optimization"].contains("overlap_comm"))
    in.training.overlapComm = c.zero_optimization.overlap_comm;
  return j;
}

}  // namespace zrt::plan
