#include "partition/model_states.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "core/error.h"
#include "core/units.h"

namespace zrt {
namespace {

constexpr std::size_t kHostAlignment = 4096;

}  // namespace

ModelStateOptions modelStateOptions(const Config& config, int rank) {
  ModelStateOptions o;
  o.stage = config.zero_optimization.stage;
  o.worldSize = config.world_size;
  o.rank = rank;
  o.precision = trainingPrecision(config);
  o.optimizer = config.optimizer.present ? config.optimizer.type : OptimizerType::Adam;
  o.sgdMomentum = config.optimizer.momentum != 0.0;
  o.offloadOptimizer = config.zero_optimization.offload_optimizer.device;
  o.pinOptimizer = config.zero_optimization.offload_optimizer.pin_memory;
  o.offloadParam = config.zero_optimization.offload_param.device;
  o.pinParam = config.zero_optimization.offload_param.pin_memory;
  o.maxInCpu = static_cast<std::uint64_t>(std::max<std::int64_t>(0, config.zero_optimization.offload_param.max_in_cpu));
  o.accumulationSteps = static_cast<int>(config.gradient_accumulation_steps);
  o.paramAndOptimizerSwapShared = o.offloadParam == OffloadDevice::Nvme && o.offloadOptimizer == OffloadDevice::Nvme &&
                                  config.zero_optimization.offload_param.nvme_path ==
                                      config.zero_optimization.offload_optimizer.nvme_path;
  return o;
}

FlatLayout flatLayout(std::span<const std::uint64_t> numels, int parts, int rank) {
  FlatLayout l;
  l.parts = parts;
  l.offsets.reserve(numels.size());
  for (std::uint64_t n : numels) {
    l.offsets.push_back(l.numel);
    l.numel += n;
  }
  l.padded = paddedLength(l.numel, parts, kShardAlignElements);
  l.shard = shardOf(l.numel, parts, rank, kShardAlignElements);
  return l;
}

void StateBuffer::FreeDeleter::operator()(void* p) const noexcept { std::free(p); }

StateBuffer::StateBuffer(Device& device, std::size_t bytes, MemTag tag, MemPlace place)
    : bytes_(bytes), tag_(tag), place_(place) {
  switch (place) {
    case MemPlace::Device: memory_ = device.allocate(bytes, tag); break;
    case MemPlace::PinnedHost: memory_ = device.allocatePinned(bytes, tag); break;
    case MemPlace::Host: {
      void* p = nullptr;
      if (bytes != 0 && posix_memalign(&p, kHostAlignment, bytes) != 0) {
        ZRT_THROW(OutOfMemory, "could not allocate ", formatBytes(bytes), " of host memory for ",
                  nameOf(tag), "\n", device.ledger().table());
      }
      host_.reset(p);
      charge_ = LedgerCharge(device.ledger(), tag, place, bytes);
      break;
    }
    case MemPlace::Nvme: charge_ = LedgerCharge(device.ledger(), tag, place, bytes); break;
  }
}

StateBuffer::StateBuffer(offload::SwapFile file, MemTag tag)
    : swap_(std::move(file)), bytes_(swap_.bytes()), tag_(tag), place_(MemPlace::Nvme) {}

StateBuffer::StateBuffer(StateBuffer&& other) noexcept
    : memory_(std::move(other.memory_)),
      host_(std::move(other.host_)),
      charge_(std::move(other.charge_)),
      swap_(std::move(other.swap_)),
      bytes_(std::exchange(other.bytes_, 0)),
      tag_(other.tag_),
      place_(other.place_) {}

StateBuffer& StateBuffer::operator=(StateBuffer&& other) noexcept {
  if (this != &other) {
    // Members release in reverse order of declaration: the charge, then the host memory.
    swap_ = std::move(other.swap_);
    charge_ = std::move(other.charge_);
    host_ = std::move(other.host_);
    memory_ = std::move(other.memory_);
    bytes_ = std::exchange(other.bytes_, 0);
    tag_ = other.tag_;
    place_ = other.place_;
  }
  return *this;
}

void* StateBuffer::data() const {
  if (memory_) return memory_.data();
  return host_.get();
}

StateBuffer ModelStates::allocate(const StatePlacement& state, MemTag tag, const char* name) {
  if (state.elements == 0) return {};
  offload::SwapSpace* space = tag == MemTag::Parameters && paramSwap_ ? paramSwap_ : swap_;
  if (state.place == MemPlace::Nvme && space)
    return StateBuffer(space->create(name, state.bytes(), tag, swapOptions_), tag);
  return StateBuffer(*device_, static_cast<std::size_t>(state.bytes()), tag, state.place);
}

ModelStates::ModelStates(Device& device, std::vector<ParamTensor> params,
                         const ModelStateOptions& options, offload::SwapSpace* swap,
                         offload::FileOpenOptions swapOptions, offload::SwapSpace* paramSwap)
    : device_(&device), swap_(swap), paramSwap_(paramSwap), swapOptions_(swapOptions), options_(options),
      params_(std::move(params)) {
  std::vector<std::uint64_t> trainable, frozen;
  std::uint64_t trainableCount = 0, frozenCount = 0;
  for (const ParamTensor& t : params_) {
    (t.trainable ? trainable : frozen).push_back(t.numel);
    (t.trainable ? trainableCount : frozenCount) += t.numel;
  }
  // The rule also refuses bad options (stage, offload pairing, rank) before anything is laid out.
  placement_ = placeModelStates(options_, trainableCount, frozenCount);

  const int partRank = partitionRank(options_.stage, options_.rank);
  trainable_ = flatLayout(trainable, placement_.padded.parts, partRank);
  frozen_ = flatLayout(frozen, placement_.padded.parts, partRank);

  parameters_ = allocate(placement_.parameters, MemTag::Parameters, "parameters");
  frozenParameters_ = allocate(placement_.frozenParameters, MemTag::Parameters, "frozen-parameters");
  parametersInCpu_ = allocate(placement_.parametersInCpu, MemTag::Parameters, "parameters-in-cpu");
  frozenParametersInCpu_ = allocate(placement_.frozenParametersInCpu, MemTag::Parameters, "frozen-parameters-in-cpu");
  gradients_ = allocate(placement_.gradients, MemTag::Gradients, "gradients");
  gradientHostShard_ = allocate(placement_.gradientHostShard, MemTag::Gradients, "gradient-host-shard");
  gradientAccumulator_ = allocate(placement_.gradientAccumulator, MemTag::Gradients, "gradient-accumulator");
  master_ = allocate(placement_.masterWeights, MemTag::OptimizerState, "master-weights");
  const char* momentNames[] = {"moment-1", "moment-2"};
  for (int i = 0; i < placement_.optimizer.moments; ++i) {
    moments_.push_back(allocate(placement_.moment, MemTag::OptimizerState, momentNames[i % 2]));
  }
}

}  // namespace zrt
