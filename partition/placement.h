// Where ZeRO puts each model state of one data-parallel rank, and how large it is: the one rule
// that the allocator (model_states.h) allocates by and zrt-plan (tools/plan) predicts by, so
// the ledger of a real allocation and zrt-plan's prediction are the same numbers by
// construction (docs/plan.md, "Where model states live"). Per state: the number of elements
// (the whole padded flat buffer, or this rank's shard of it), the bytes per element and the
// memory it lives in (device, pinned or pageable host, NVMe).
// Pure functions over plain data; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/config/config.h"
#include "core/dtype.h"
#include "core/memory_ledger.h"
#include "partition/stage_rules.h"

namespace zrt {

// What the placement depends on: the stage, the ranks, the training dtype, the optimizer and the
// offload settings (with their pin_memory).
struct ModelStateOptions {
  int stage = 0;
  int worldSize = 1;
  int rank = 0;
  DType precision = DType::F16;  // dtype of parameters and gradients
  OptimizerType optimizer = OptimizerType::Adam;
  bool sgdMomentum = false;
  OffloadDevice offloadOptimizer = OffloadDevice::None;
  bool pinOptimizer = false;  // offload_optimizer.pin_memory: page-locked host memory
  OffloadDevice offloadParam = OffloadDevice::None;
  bool pinParam = false;  // offload_param.pin_memory
  // offload_param.max_in_cpu with device nvme: elements of the rank's parameter shard that stay
  // in host memory (the first ones, trainable before frozen); the rest go to NVMe. 0 here (every
  // parameter on NVMe); modelStateOptions() takes the config's value (DeepSpeed's default 1e9).
  std::uint64_t maxInCpu = 0;
  int accumulationSteps = 1;  // gradient_accumulation_steps
  // offload_param and offload_optimizer both nvme on the same nvme_path: the parameters may live
  // in the optimizer's swap files (placeModelStates decides; see parametersInMaster).
  bool paramAndOptimizerSwapShared = false;
};

// The flat buffers' sizes in elements: Ψ' = paddedLength(Ψ, N', kShardAlignElements) with
// N' = partitionCount(stage, N), and this rank's shard Ψ'/N' (shard.h; the same for every rank),
// for the trainable and the frozen parameters.
struct PaddedSizes {
  int parts = 1;
  std::uint64_t trainable = 0, trainableShard = 0;
  std::uint64_t frozen = 0, frozenShard = 0;
};

// One model state: `elements` of `elementBytes` each in `place`; none when elements is 0.
// `sharded`: the elements are this rank's shard (Ψ'/N'), not the whole buffer (Ψ').
struct StatePlacement {
  std::uint64_t elements = 0;
  std::size_t elementBytes = 0;
  MemPlace place = MemPlace::Device;
  bool sharded = false;
  std::uint64_t bytes() const { return elements * elementBytes; }
};

// Every model state of one rank. The moments are `optimizer.moments` buffers alike.
struct ModelStatePlacement {
  PaddedSizes padded;
  OptimizerStateSpec optimizer;
  StatePlacement parameters;         // trainable, in the training dtype
  StatePlacement frozenParameters;   // by the same rule
  // offload_param nvme: the first elements of each shard kept in host memory (max_in_cpu); the
  // two above then hold only the rest, on NVMe.
  StatePlacement parametersInCpu, frozenParametersInCpu;
  StatePlacement gradients;          // on the device
  StatePlacement gradientHostShard;  // pinned host, with the optimizer offloaded
  StatePlacement gradientAccumulator;  // fp32 sum of the micro-steps (16-bit, accumulation > 1)
  StatePlacement masterWeights;      // fp32
  StatePlacement moment;             // fp32, each of optimizer.moments
  // fp32 with parameters and optimizer in the same swap space: the master weights are the
  // parameter shard's values, so the shard's NVMe part (these many elements, after
  // parametersInCpu) is read from the master weights' swap file and `parameters` is empty. Each
  // step then writes the shard once (the optimizer's write-back) instead of twice.
  std::uint64_t parametersInMaster = 0;
  std::uint64_t bytes() const;       // everything, moments counted optimizer.moments times
};

// Where offload device `d` puts a state: the device without offload, pinned or pageable host
// memory for cpu (by pin_memory), NVMe.
MemPlace offloadPlace(OffloadDevice d, bool pinned);

// The rule, with `trainable` and `frozen` the unpadded parameter counts (Ψ and Φ):
//   parameters   Ψ' (stages 0-2) or Ψ'/N (stage 3), where offload_param puts them; frozen alike;
//                with offload_param nvme the first max_in_cpu elements (trainable first) stay in
//                host memory, pinned by pin_memory; in fp32 with the optimizer in the same swap
//                space the rest is the master weights' file (parametersInMaster)
//   gradients    Ψ' on the device (stages 0-1) or Ψ'/N (stages 2-3); with offload_optimizer the
//                shard Ψ'/N lives in pinned host memory instead, and stage 1 keeps the device
//                buffer as well (it accumulates there, the host shard receives the reduced part)
//   accumulator  with a 16-bit dtype and accumulation > 1: the micro-steps' gradients add up in
//                fp32, not in the dtype, Ψ' (stages 0-1) or Ψ'/N (stages 2-3), on the device
//   master       Ψ' (stage 0) or Ψ'/N (stages 1-3) in fp32, when kept (optimizerStateSpec)
//   moments      each like master, where offload_optimizer puts them
// Throws InvalidArgument for a stage outside 0..3, a bad offload pairing (validateOffload) or a
// rank outside the world.
ModelStatePlacement placeModelStates(const ModelStateOptions& options, std::uint64_t trainable,
                                     std::uint64_t frozen);

}  // namespace zrt
