#include "partition/model_states.h"

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
  o.precision = config.bf16.enabled ? DType::BF16 : config.fp16.enabled ? DType::F16 : DType::F32;
  o.optimizer = config.optimizer.present ? config.optimizer.type : OptimizerType::Adam;
  o.sgdMomentum = config.optimizer.momentum != 0.0;
  o.offloadOptimizer = config.zero_optimization.offload_optimizer.device;
  o.pinOptimizer = config.zero_optimization.offload_optimizer.pin_memory;
  o.offloadParam = config.zero_optimization.offload_param.device;
  o.pinParam = config.zero_optimization.offload_param.pin_memory;
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

StateBuffer::StateBuffer(StateBuffer&& other) noexcept
    : memory_(std::move(other.memory_)),
      host_(std::move(other.host_)),
      charge_(std::move(other.charge_)),
      bytes_(std::exchange(other.bytes_, 0)),
      tag_(other.tag_),
      place_(other.place_) {}

StateBuffer& StateBuffer::operator=(StateBuffer&& other) noexcept {
  if (this != &other) {
    // Members release in reverse order of declaration: the charge, then the host memory.
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

StateBuffer ModelStates::place(std::uint64_t elements, std::size_t elementSize, MemTag tag,
                               OffloadDevice offload, bool pinned) {
  if (elements == 0) return {};
  const std::size_t bytes = static_cast<std::size_t>(elements) * elementSize;
  switch (offload) {
    case OffloadDevice::None: return StateBuffer(*device_, bytes, tag, MemPlace::Device);
    case OffloadDevice::Cpu:
      return StateBuffer(*device_, bytes, tag, pinned ? MemPlace::PinnedHost : MemPlace::Host);
    case OffloadDevice::Nvme: return StateBuffer(*device_, bytes, tag, MemPlace::Nvme);
  }
  ZRT_THROW(InvalidArgument, "unknown offload device");
}

ModelStates::ModelStates(Device& device, std::vector<ParamTensor> params,
                         const ModelStateOptions& options)
    : device_(&device), options_(options), params_(std::move(params)) {
  const ModelStateOptions& o = options_;
  if (o.worldSize < 1 || o.rank < 0 || o.rank >= o.worldSize) {
    ZRT_THROW(InvalidArgument, "model states: rank ", o.rank, " is outside a world of ",
              o.worldSize);
  }
  validateOffload(o.stage, o.offloadOptimizer, o.offloadParam);
  const StageRules rules = stageRules(o.stage);
  const int parts = partitionCount(o.stage, o.worldSize);

  std::vector<std::uint64_t> trainable, frozen;
  for (const ParamTensor& t : params_) (t.trainable ? trainable : frozen).push_back(t.numel);
  const int partRank = partitionRank(o.stage, o.rank);
  trainable_ = flatLayout(trainable, parts, partRank);
  frozen_ = flatLayout(frozen, parts, partRank);

  const bool optimizerOffloaded = o.offloadOptimizer != OffloadDevice::None;
  optimizerSpec_ = optimizerStateSpec(o.optimizer, o.sgdMomentum, o.precision, optimizerOffloaded);
  const std::size_t p = dtypeSize(o.precision);

  // Parameters: whole buffers until stage 3 shards them; offload_param moves what the rank keeps.
  parameters_ = place(rules.shardParameters ? trainable_.shard.count : trainable_.padded, p,
                      MemTag::Parameters, o.offloadParam, o.pinParam);
  frozenParameters_ = place(rules.shardParameters ? frozen_.shard.count : frozen_.padded, p,
                            MemTag::Parameters, o.offloadParam, o.pinParam);

  // Gradients: stage 0-1 accumulate the whole buffer on the device (reduced once per step);
  // stage 2-3 keep only the shard, which moves to pinned host memory when the optimizer runs
  // there. Stage 1 with an offloaded optimizer keeps both: the device buffer accumulates, the
  // host shard receives the reduced part.
  if (!rules.shardGradients) {
    gradients_ = place(trainable_.padded, p, MemTag::Gradients, OffloadDevice::None, false);
  } else if (!optimizerOffloaded) {
    gradients_ = place(trainable_.shard.count, p, MemTag::Gradients, OffloadDevice::None, false);
  }
  if (optimizerOffloaded && trainable_.shard.count != 0) {
    gradientHostShard_ = StateBuffer(*device_, trainable_.shard.count * p, MemTag::Gradients,
                                     MemPlace::PinnedHost);
  }

  // Optimizer state: fp32, the shard from stage 1 on (the whole buffer at stage 0, where the
  // shard is the whole buffer), wherever offload_optimizer puts it.
  const std::uint64_t optElements = rules.shardOptimizer ? trainable_.shard.count : trainable_.padded;
  if (optimizerSpec_.masterWeights) {
    master_ = place(optElements, 4, MemTag::OptimizerState, o.offloadOptimizer, o.pinOptimizer);
  }
  for (int i = 0; i < optimizerSpec_.moments; ++i) {
    moments_.push_back(
        place(optElements, 4, MemTag::OptimizerState, o.offloadOptimizer, o.pinOptimizer));
  }
}

}  // namespace zrt
