#include "tools/plan/write_config.h"

namespace zrt::plan {

namespace {

nlohmann::json offloadSection(OffloadDevice device, bool pin, const nlohmann::json* existing,
                              const std::string& nvmePath) {
  nlohmann::json s = existing && existing->is_object() ? *existing : nlohmann::json::object();
  s["device"] = std::string(nameOf(device));
  if (device == OffloadDevice::None) {
    s.erase("nvme_path");
    return s;
  }
  s["pin_memory"] = pin;
  if (device == OffloadDevice::Nvme && !s.contains("nvme_path")) s["nvme_path"] = nvmePath;
  if (device == OffloadDevice::Cpu) s.erase("nvme_path");
  return s;
}

}  // namespace

nlohmann::json strategyConfig(const Plan& plan, const Evaluation& chosen,
                              const WriteConfigOptions& options) {
  const PlanInputs& in = plan.inputs;
  const Strategy& s = chosen.strategy;
  const Training& tr = in.training;
  nlohmann::json j = options.base && options.base->is_object() ? *options.base : nlohmann::json::object();

  j["train_micro_batch_size_per_gpu"] = s.microBatch;
  j["gradient_accumulation_steps"] = s.gradAccum;
  j["train_batch_size"] = s.microBatch * s.gradAccum * static_cast<std::uint64_t>(in.hardware.worldSize);

  // DeepSpeed's old name for the bf16 section: written under the current name only (the config
  // reader refuses a file with both).
  if (j.contains("bfloat16")) {
    if (!j.contains("bf16")) j["bf16"] = j["bfloat16"];
    j.erase("bfloat16");
  }
  const bool fp16 = tr.precision == DType::F16, bf16 = tr.precision == DType::BF16;
  if (fp16 || j.contains("fp16")) {
    if (!j["fp16"].is_object()) j["fp16"] = nlohmann::json::object();
    j["fp16"]["enabled"] = fp16;
  }
  if (bf16 || j.contains("bf16")) {
    if (!j["bf16"].is_object()) j["bf16"] = nlohmann::json::object();
    j["bf16"]["enabled"] = bf16;
  }

  if (!j.contains("optimizer")) {
    j["optimizer"] = {{"type", std::string(nameOf(tr.optimizer))}};
    if (tr.optimizer == OptimizerType::SGD && options.momentum != 0.0)
      j["optimizer"]["params"] = {{"momentum", options.momentum}};
  }

  nlohmann::json& z = j["zero_optimization"];
  if (!z.is_object()) z = nlohmann::json::object();
  z["stage"] = s.stage;
  z["reduce_bucket_size"] = tr.zero.reduce_bucket_size;
  z["allgather_bucket_size"] = tr.zero.allgather_bucket_size;
  if (tr.overlapComm) z["overlap_comm"] = *tr.overlapComm;
  if (s.stage == 3) {
    z["stage3_prefetch_bucket_size"] = tr.zero.stage3_prefetch_bucket_size;
    z["stage3_max_live_parameters"] = tr.zero.stage3_max_live_parameters;
  }
  // DeepSpeed's deprecated booleans stand for the offload sections written below: kept, they
  // would clash with those (the config reader refuses both forms) or contradict the strategy.
  z.erase("cpu_offload");
  z.erase("cpu_offload_param");
  const nlohmann::json* oldOpt = z.contains("offload_optimizer") ? &z["offload_optimizer"] : nullptr;
  nlohmann::json opt = offloadSection(s.offloadOptimizer, tr.zero.offload_optimizer.pin_memory, oldOpt,
                                      options.nvmePath);
  const nlohmann::json* oldParam = z.contains("offload_param") ? &z["offload_param"] : nullptr;
  nlohmann::json param = offloadSection(s.offloadParam, tr.zero.offload_param.pin_memory, oldParam,
                                        options.nvmePath);
  // Partial optimizer offload (ratio below 1) exists at stage 3 only.
  if (s.stage != 3) opt.erase("ratio");
  if (s.offloadOptimizer != OffloadDevice::None || oldOpt) z["offload_optimizer"] = std::move(opt);
  if (s.offloadParam != OffloadDevice::None || oldParam) z["offload_param"] = std::move(param);
  return j;
}

}  // namespace zrt::plan
