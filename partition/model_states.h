// The model states one data-parallel rank holds under a ZeRO stage, allocated for real: the
// training-dtype parameters and gradients, the fp32 master weights and the optimizer moments, as
// flat buffers padded by shard.h's rules, each placed on the device, in (pinned) host memory or
// on NVMe as placement.h's rule says. Every byte goes through the Device or a LedgerCharge, so
// the MemoryLedger shows exactly what zrt-plan predicts (docs/plan.md, "Where model states
// live"). This is the part of the Engine that owns model states; the Engine fills and updates
// these buffers.
// Thread-safety: build and destroy on one thread; the accessors are const and may be shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/shard.h"
#include "partition/placement.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/memory_ledger.h"
#include "offload/swap_space.h"

namespace zrt {

// One parameter tensor of the model. Frozen tensors (trainable = false, e.g. the base of a LoRA
// model) have parameters only: no gradients and no optimizer state.
struct ParamTensor {
  std::string name;
  std::uint64_t numel = 0;
  bool trainable = true;
};

// The options a resolved config asks for: stage, dtype (bf16, fp16, else fp32), optimizer and
// offload settings. An absent optimizer section means Adam (what a trainer supplies by default).
ModelStateOptions modelStateOptions(const Config& config, int rank);

// The tensors of one group laid end to end in a flat buffer of `padded` elements, of which this
// rank owns `shard`.
struct FlatLayout {
  std::uint64_t numel = 0;
  std::uint64_t padded = 0;  // paddedLength(numel, parts, kShardAlignElements)
  int parts = 1;             // ranks the buffer is split over (partitionCount)
  ShardRange shard;
  std::vector<std::uint64_t> offsets;  // where each tensor starts, in the order given
};

FlatLayout flatLayout(std::span<const std::uint64_t> numels, int parts, int rank);

// One model-state buffer: memory on the device or host, or a swap file on NVMe (data() is null;
// the file is charged to the ledger by the SwapSpace that made it). Without swap space (zrt-plan,
// tests of the placement) an NVMe state is only charged.
class StateBuffer {
 public:
  StateBuffer() = default;
  StateBuffer(Device& device, std::size_t bytes, MemTag tag, MemPlace place);
  StateBuffer(offload::SwapFile file, MemTag tag);
  StateBuffer(StateBuffer&& other) noexcept;
  StateBuffer& operator=(StateBuffer&& other) noexcept;
  StateBuffer(const StateBuffer&) = delete;
  StateBuffer& operator=(const StateBuffer&) = delete;

  void* data() const;
  std::size_t bytes() const { return bytes_; }
  MemTag tag() const { return tag_; }
  MemPlace place() const { return place_; }
  explicit operator bool() const { return bytes_ != 0; }
  // The swap file of an NVMe state; null for memory (and for NVMe without swap space).
  const offload::SwapFile* swapFile() const { return swap_.file() ? &swap_ : nullptr; }

 private:
  struct FreeDeleter {
    void operator()(void* p) const noexcept;
  };
  DeviceMemory memory_;                       // device and pinned host
  std::unique_ptr<void, FreeDeleter> host_;  // pageable host
  LedgerCharge charge_;                       // pageable host, NVMe without swap space
  offload::SwapFile swap_;                    // NVMe
  std::size_t bytes_ = 0;
  MemTag tag_ = MemTag::Other;
  MemPlace place_ = MemPlace::Device;
};

class ModelStates {
 public:
  // Allocates this rank's model states; throws InvalidArgument for a bad stage/offload pairing
  // or rank, OutOfMemory (with the ledger) when the device is too small.
  // With `swap` (and `swapOptions` from the offload engine that will read them), states placed
  // on NVMe get swap files of their own; the parameters' in `paramSwap` when given
  // (offload_param has its own nvme_path).
  ModelStates(Device& device, std::vector<ParamTensor> params, const ModelStateOptions& options,
              offload::SwapSpace* swap = nullptr, offload::FileOpenOptions swapOptions = {},
              offload::SwapSpace* paramSwap = nullptr);

  const ModelStateOptions& options() const { return options_; }
  const std::vector<ParamTensor>& params() const { return params_; }
  const FlatLayout& trainableLayout() const { return trainable_; }
  const FlatLayout& frozenLayout() const { return frozen_; }
  const OptimizerStateSpec& optimizerSpec() const { return placement_.optimizer; }
  // What placement.h's rule gave: each buffer below is allocated from it.
  const ModelStatePlacement& placement() const { return placement_; }

  // Trainable parameters: the whole flat buffer at stages 0-2, this rank's shard at stage 3.
  const StateBuffer& parameters() const { return parameters_; }
  // Frozen parameters, by the same rule.
  const StateBuffer& frozenParameters() const { return frozenParameters_; }
  // offload_param nvme: the first elements of each shard, kept in host memory (max_in_cpu);
  // parameters() and frozenParameters() are then swap files holding the rest.
  const StateBuffer& parametersInCpu() const { return parametersInCpu_; }
  const StateBuffer& frozenParametersInCpu() const { return frozenParametersInCpu_; }
  // Gradients on the device: the whole flat buffer at stages 0-1, the shard at stage 2-3; none
  // at stage 2-3 with the optimizer offloaded (buckets reduce straight into the host shard).
  const StateBuffer& gradients() const { return gradients_; }
  // With the optimizer offloaded: the shard's gradients in pinned host memory (the target of the
  // device-to-host copies; the CPU optimizer then writes the updated 16-bit shard into it for the
  // copy back).
  const StateBuffer& gradientHostShard() const { return gradientHostShard_; }
  // 16-bit training with gradient accumulation: the fp32 sum of the micro-steps' gradients,
  // the whole buffer at stages 0-1, the shard at 2-3 (placement.h).
  const StateBuffer& gradientAccumulator() const { return gradientAccumulator_; }
  // fp32 master weights of the shard (of everything at stage 0); empty when not kept.
  const StateBuffer& masterWeights() const { return master_; }
  const std::vector<StateBuffer>& moments() const { return moments_; }

 private:
  StateBuffer allocate(const StatePlacement& state, MemTag tag, const char* name);

  Device* device_;
  offload::SwapSpace* swap_ = nullptr;
  offload::SwapSpace* paramSwap_ = nullptr;
  offload::FileOpenOptions swapOptions_;
  ModelStateOptions options_;
  std::vector<ParamTensor> params_;
  FlatLayout trainable_;
  FlatLayout frozen_;
  ModelStatePlacement placement_;
  StateBuffer parameters_;
  StateBuffer frozenParameters_;
  StateBuffer parametersInCpu_;
  StateBuffer frozenParametersInCpu_;
  StateBuffer gradients_;
  StateBuffer gradientHostShard_;
  StateBuffer gradientAccumulator_;
  StateBuffer master_;
  std::vector<StateBuffer> moments_;
};

}  // namespace zrt
