// zrt-plan's inputs as plain data: the hardware, the training setup and a strategy (the four
// levers: micro-batch with accumulation, activation checkpointing, ZeRO stage with offload, LoRA
// adapters). Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/config/config.h"
#include "core/dtype.h"

namespace zrt::plan {

struct Hardware {
  int worldSize = 1;
  int ranksPerNode = 1;
  std::uint64_t deviceBytes = 80ull << 30;  // per rank
  std::uint64_t hostBytes = 0;              // per node
  std::uint64_t nvmeBytes = 0;              // free space per node
  std::uint64_t reserveBytes = 0;           // per rank, kept free on the device
  // Pinned swap-buffer pools on ZRT's host device move into transparent huge pages of this size
  // and are padded to whole ones (offload/pinned_buffer_pool.h); 0 on a GPU, where they are not.
  std::uint64_t pinnedHugePageBytes = 0;
  // The NVMe file system's O_DIRECT alignment: a parameter read starts at an aligned file offset,
  // so its staging buffer has room for two alignments more (partition/param_store.h).
  std::uint64_t nvmeBlockBytes = 4096;
  // Bandwidths in bytes per second and the achieved compute rate in FLOP/s, per rank for PCIe,
  // network and compute, per node for host memory and NVMe (shared by the node's ranks).
  double pcieBps = 25e9;
  double hostMemBps = 100e9;
  double nvmeReadBps = 3e9;
  double nvmeWriteBps = 2e9;
  double netBps = 25e9;
  double flops = 100e12;
  std::string nvmeBandwidthSource = "assumed";
};

struct Training {
  DType precision = DType::F16;
  OptimizerType optimizer = OptimizerType::Adam;
  bool sgdMomentum = false;
  std::uint64_t seqLen = 2048;
  // Attention scores are not kept for the backward pass (FlashAttention, or Korthikanti et al.'s
  // selective recomputation): the 5as/h term of the activation formula drops out.
  bool flashAttention = false;
  // overlap_comm as the config wrote it; absent: DeepSpeed's default, on at stage 3 only.
  std::optional<bool> overlapComm;
  // Bucket sizes, stage 3 limits and offload buffer settings (DeepSpeed's defaults unless a
  // config gave them).
  ZeroConfig zero;
};

struct Strategy {
  int stage = 0;
  OffloadDevice offloadOptimizer = OffloadDevice::None;
  OffloadDevice offloadParam = OffloadDevice::None;
  bool checkpointing = false;
  bool lora = false;
  std::uint64_t microBatch = 1;
  std::uint64_t gradAccum = 1;
  // "z2", "z3-cpu+cpu-ckpt-lora": stage, offload (optimizer[+param]), levers.
  std::string id() const;
  std::string describe() const;
};

}  // namespace zrt::plan
