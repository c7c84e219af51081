#include "tools/ladder/rungs.h"

#include <cstdio>

#include "core/error.h"

namespace zrt::ladder {

void checkSpec(const LadderSpec& s) {
  if (s.microBatch < 1) ZRT_THROW(InvalidArgument, "--micro-batch must be at least 1");
  if (s.gradAccum < 1) ZRT_THROW(InvalidArgument, "--grad-accum must be at least 1");
  if (s.smallMicroBatch < 1 || s.microBatch % s.smallMicroBatch != 0)
    ZRT_THROW(InvalidArgument, "--small-micro-batch ", s.smallMicroBatch,
              " must divide --micro-batch ", s.microBatch,
              " (the accumulation rung keeps the global batch)");
  if (s.ranks < 1) ZRT_THROW(InvalidArgument, "--ranks must be at least 1, got ", s.ranks);
  if (!s.precision.empty() && s.precision != "fp32" && s.precision != "fp16" && s.precision != "bf16")
    ZRT_THROW(InvalidArgument, "--precision must be fp32, fp16 or bf16, got '", s.precision, "'");
  if (s.lora.rank < 1) ZRT_THROW(InvalidArgument, "--lora-rank must be at least 1, got ", s.lora.rank);
  if (s.lora.targets.empty()) ZRT_THROW(InvalidArgument, "--lora-targets names no layer");
}

std::vector<Rung> ladderRungs(const LadderSpec& spec) {
  checkSpec(spec);
  std::vector<Rung> rungs;
  plan::Strategy s;
  s.microBatch = spec.microBatch;
  s.gradAccum = spec.gradAccum;
  rungs.push_back({"baseline", s});
  s.gradAccum = spec.gradAccum * (spec.microBatch / spec.smallMicroBatch);
  s.microBatch = spec.smallMicroBatch;
  rungs.push_back({"accumulation", s});
  s.checkpointing = true;
  rungs.push_back({"+ checkpointing", s});
  for (int stage = 1; stage <= 3; ++stage) {
    s.stage = stage;
    rungs.push_back({"+ ZeRO " + std::to_string(stage), s});
  }
  const plan::Strategy stage3 = s;
  s.offloadOptimizer = OffloadDevice::Cpu;
  s.offloadParam = OffloadDevice::Cpu;
  rungs.push_back({"+ CPU offload", s});
  s.offloadOptimizer = OffloadDevice::Nvme;
  s.offloadParam = OffloadDevice::Nvme;
  rungs.push_back({"+ NVMe offload", s});
  s = stage3;
  s.lora = true;
  rungs.push_back({"+ LoRA", s});
  return rungs;
}

nlohmann::json defaultBaseConfig() {
  return nlohmann::json::parse(R"({
    "gradient_clipping": 1.0,
    "optimizer": {
      "type": "AdamW",
      "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}
    },
    "scheduler": {
      "type": "WarmupLR",
      "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 20,
                 "warmup_type": "linear"}
    },
    "zero_optimization": {
      "stage": 0,
      "overlap_comm": true,
      "reduce_bucket_size": 5e6,
      "allgather_bucket_size": 5e6,
      "stage3_prefetch_bucket_size": 5e6,
      "stage3_param_persistence_threshold": 1e4
    },
    "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": false,
            "overlap_events": true},
    "zrt": {"device": "host", "comm_timeout_s": 120}
  })");
}

namespace {

nlohmann::json offloadSection(OffloadDevice d, const std::string& nvmePath) {
  nlohmann::json o = {{"device", std::string(nameOf(d))}, {"pin_memory", true}};
  if (d == OffloadDevice::Nvme) o["nvme_path"] = nvmePath;
  return o;
}

}  // namespace

nlohmann::json rungConfig(const nlohmann::json& base, const LadderSpec& spec, const Rung& rung) {
  nlohmann::json c = base;
  const plan::Strategy& s = rung.strategy;
  c["train_batch_size"] = rung.globalBatch(spec.ranks);
  c["train_micro_batch_size_per_gpu"] = s.microBatch;
  c["gradient_accumulation_steps"] = s.gradAccum;
  nlohmann::json& z = c["zero_optimization"];
  z["stage"] = s.stage;
  // An offload section the base may carry is replaced, not merged: its keys belong to a device
  // this rung may not use.
  z.erase("offload_optimizer");
  z.erase("offload_param");
  if (s.offloadOptimizer != OffloadDevice::None)
    z["offload_optimizer"] = offloadSection(s.offloadOptimizer, spec.nvmePath);
  if (s.offloadParam != OffloadDevice::None) {
    z["offload_param"] = offloadSection(s.offloadParam, spec.nvmePath);
    // Every parameter element on NVMe: DeepSpeed's default max_in_cpu (1e9) would keep a
    // small model's whole shard in host memory, and the rung would not move parameters at all.
    if (s.offloadParam == OffloadDevice::Nvme) z["offload_param"]["max_in_cpu"] = 0;
  }
  if (!spec.precision.empty()) {
    c.erase("fp16");
    c.erase("bf16");
    if (spec.precision == "fp16") c["fp16"] = {{"enabled", true}};
    if (spec.precision == "bf16") c["bf16"] = {{"enabled", true}};
  }
  c["zrt"]["device"] = "host";
  return c;
}

std::vector<std::string> trainerArgs(const LadderSpec& spec, const Rung& rung, const RunFiles& files,
                                     int steps) {
  const ModelShape& m = spec.model;
  std::vector<std::string> a = {"--config", files.config, "--steps", std::to_string(steps),
                                "--layers", std::to_string(m.layers), "--hidden", std::to_string(m.hidden),
                                "--heads", std::to_string(m.heads), "--seq-len", std::to_string(m.seqLen),
                                // One validation batch after the last step: validation is not
                                // what the ladder measures, and it runs outside the step time.
                                "--eval-every", "0", "--eval-batches", "1", "--progress", "off",
                                "--json-log", files.jsonLog, "--device-mem", files.deviceMem};
  if (!files.data.empty()) {
    a.push_back("--data");
    a.push_back(files.data);
  }
  if (rung.strategy.checkpointing) a.push_back("--activation-checkpointing");
  if (rung.strategy.lora) {
    std::string targets;
    for (const std::string& t : spec.lora.targets) targets += (targets.empty() ? "" : ",") + t;
    char alpha[32];
    std::snprintf(alpha, sizeof alpha, "%g", spec.lora.alpha);
    a.insert(a.end(), {"--lora-rank", std::to_string(spec.lora.rank), "--lora-alpha", alpha,
                       "--lora-targets", targets});
  }
  return a;
}

}  // namespace zrt::ladder
