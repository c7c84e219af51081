// The rungs of the memory ladder and how each one runs: which levers it pulls (as a zrt-plan
// Strategy, so the planner evaluates exactly what runs), the DeepSpeed config written for it and
// zrt-train's command line. Each rung adds one lever to the one before it:
//   baseline          stage 0, the full micro-batch
//   accumulation      a smaller micro-batch, more accumulation steps (the same global batch)
//   + checkpointing   activation checkpointing
//   + ZeRO 1, 2, 3    the stage, on the same ranks
//   + CPU offload     stage 3, optimizer state and parameter shard in pinned host memory
//   + NVMe offload    stage 3, optimizer state and parameter shard in swap files (max_in_cpu 0:
//                     every parameter element on NVMe, read through pinned staging buffers)
//   + LoRA            stage 3 with checkpointing and the small micro-batch, base frozen,
//                     adapters trained; no offload (an adapter's optimizer state is too small
//                     to be worth a PCIe or NVMe round trip)
// Every rung runs on the same ranks with the same global batch, so step times compare.
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/plan/inputs.h"

namespace zrt::ladder {

// zrt-train's GPT-2 shape (the vocabulary is 256 bytes).
struct ModelShape {
  int layers = 4;
  int hidden = 128;
  int heads = 4;
  int seqLen = 64;
};

struct LoraSettings {
  int rank = 8;
  double alpha = 16;
  // zrt-train's names: qkv (attn.c_attn), proj (attn.c_proj), fc (mlp.c_fc), mlp_proj
  // (mlp.c_proj).
  std::vector<std::string> targets{"qkv", "proj", "fc", "mlp_proj"};
};

struct LadderSpec {
  ModelShape model;
  std::uint64_t microBatch = 4;       // the baseline's, per rank
  std::uint64_t gradAccum = 2;        // the baseline's
  std::uint64_t smallMicroBatch = 1;  // from the accumulation rung on; divides microBatch
  int ranks = 2;
  std::uint64_t budgetBytes = 0;  // device memory per rank the ladder judges "fits" against
  std::string precision;          // fp32, fp16 or bf16; empty: the base config's
  std::string nvmePath;           // the NVMe rung's swap directory
  LoraSettings lora;
};

struct Rung {
  std::string name;        // "baseline", "+ ZeRO 2", ...
  plan::Strategy strategy;  // stage, offload, checkpointing, LoRA, micro-batch, accumulation
  std::uint64_t globalBatch(int ranks) const {
    return strategy.microBatch * strategy.gradAccum * static_cast<std::uint64_t>(ranks);
  }
};

// Throws InvalidArgument naming the flag: a micro-batch, accumulation or rank count below 1, a
// small micro-batch that does not divide the micro-batch, an unknown precision, an empty LoRA
// target list or a rank below 1.
void checkSpec(const LadderSpec& spec);

std::vector<Rung> ladderRungs(const LadderSpec& spec);

// The config every rung starts from when no --base-config is given: configs/stage0.json's
// optimizer (AdamW lr 1e-3, betas 0.9/0.95, weight decay 0.01), schedule (WarmupLR over 20
// steps), clipping and bucket sizes (5e6 elements, overlap_comm), stage 3's prefetch and
// persistence settings of configs/stage3.json, the aio settings of
// configs/stage3_nvme_offload.json, fp32, the host device.
nlohmann::json defaultBaseConfig();

// `base` with the rung's batch sizes, ZeRO stage and offload settings (pin_memory on; nvme_path
// for NVMe; max_in_cpu 0 for offload_param nvme), the precision (when the spec names one) and
// the host device. Keys the ladder does not decide
// (optimizer, scheduler, bucket sizes, aio) are kept.
nlohmann::json rungConfig(const nlohmann::json& base, const LadderSpec& spec, const Rung& rung);

struct RunFiles {
  std::string config;      // the rung's config file
  std::string jsonLog;     // --json-log
  std::string deviceMem;   // --device-mem: the simulated device's capacity for the run
  std::string data;        // --data; empty: the trainer's default
};

// zrt-train's arguments (after the program): the shape, --steps, no validation until the last
// step and only one batch of it, plain progress lines, and the rung's levers
// (--activation-checkpointing; --lora-rank/--lora-alpha/--lora-targets).
std::vector<std::string> trainerArgs(const LadderSpec& spec, const Rung& rung, const RunFiles& files,
                                     int steps);

}  // namespace zrt::ladder
