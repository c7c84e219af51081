#include "partition/placement.h"

#include <algorithm>

#include "core/error.h"
#include "core/shard.h"

namespace zrt {

std::uint64_t ModelStatePlacement::bytes() const {
  return parameters.bytes() + frozenParameters.bytes() + parametersInCpu.bytes() +
         frozenParametersInCpu.bytes() + gradients.bytes() +
         gradientHostShard.bytes() + gradientAccumulator.bytes() + masterWeights.bytes() +
         static_cast<std::uint64_t>(optimizer.moments) * moment.bytes();
}

MemPlace offloadPlace(OffloadDevice d, bool pinned) {
  switch (d) {
    case OffloadDevice::None: return MemPlace::Device;
    case OffloadDevice::Cpu: return pinned ? MemPlace::PinnedHost : MemPlace::Host;
    case OffloadDevice::Nvme: return MemPlace::Nvme;
  }
  ZRT_THROW(InvalidArgument, "unknown offload device");
}

ModelStatePlacement placeModelStates(const ModelStateOptions& o, std::uint64_t trainable,
                                     std::uint64_t frozen) {
  if (o.worldSize < 1 || o.rank < 0 || o.rank >= o.worldSize) {
    ZRT_THROW(InvalidArgument, "model states: rank ", o.rank, " is outside a world of ",
              o.worldSize);
  }
  validateOffload(o.stage, o.offloadOptimizer, o.offloadParam);
  const StageRules rules = stageRules(o.stage);

  ModelStatePlacement m;
  PaddedSizes& pad = m.padded;
  pad.parts = partitionCount(o.stage, o.worldSize);
  const int partRank = partitionRank(o.stage, o.rank);
  pad.trainable = paddedLength(trainable, pad.parts, kShardAlignElements);
  pad.trainableShard = shardOf(trainable, pad.parts, partRank, kShardAlignElements).count;
  pad.frozen = paddedLength(frozen, pad.parts, kShardAlignElements);
  pad.frozenShard = shardOf(frozen, pad.parts, partRank, kShardAlignElements).count;

  const bool optimizerOffloaded = o.offloadOptimizer != OffloadDevice::None;
  m.optimizer = optimizerStateSpec(o.optimizer, o.sgdMomentum, o.precision, optimizerOffloaded);
  const std::size_t p = dtypeSize(o.precision);

  // Parameters: whole buffers until stage 3 shards them; offload_param moves what the rank keeps.
  const MemPlace paramPlace = offloadPlace(o.offloadParam, o.pinParam);
  const bool shardP = rules.shardParameters;
  m.parameters = {shardP ? pad.trainableShard : pad.trainable, p, paramPlace, shardP};
  m.frozenParameters = {shardP ? pad.frozenShard : pad.frozen, p, paramPlace, shardP};
  if (o.offloadParam == OffloadDevice::Nvme) {
    const MemPlace cpu = offloadPlace(OffloadDevice::Cpu, o.pinParam);
    // A split inside a buffer falls on a 4 KiB boundary, where a direct (O_DIRECT) transfer of
    // the NVMe part can start.
    const std::uint64_t block = 4096 / p;
    auto inCpu = [&](std::uint64_t budget, std::uint64_t elements) {
      return budget >= elements ? elements : budget - budget % block;
    };
    const std::uint64_t t = inCpu(o.maxInCpu, m.parameters.elements);
    const std::uint64_t f = inCpu(o.maxInCpu - t, m.frozenParameters.elements);
    m.parametersInCpu = {t, p, cpu, shardP};
    m.frozenParametersInCpu = {f, p, cpu, shardP};
    m.parameters.elements -= t;
    m.frozenParameters.elements -= f;
  }

  // Gradients: stage 0-1 accumulate the whole buffer on the device (reduced once per step);
  // stage 2-3 keep only the shard, which moves to pinned host memory when the optimizer runs
  // there (buckets reduce straight into it). Stage 1 with an offloaded optimizer keeps both.
  if (!rules.shardGradients) {
    m.gradients = {pad.trainable, p, MemPlace::Device, false};
  } else if (!optimizerOffloaded) {
    m.gradients = {pad.trainableShard, p, MemPlace::Device, true};
  }
  if (optimizerOffloaded) m.gradientHostShard = {pad.trainableShard, p, MemPlace::PinnedHost, true};
  // A 16-bit sum of micro-steps would round at every add (bf16 keeps 8 bits: a micro-step's
  // gradient under 1/256 of the running sum would vanish), so they add up in fp32.
  if (o.precision != DType::F32 && o.accumulationSteps > 1) {
    const bool shardG = rules.shardGradients;
    // With the optimizer offloaded the shard's sum lives beside the host shard it reads.
    const MemPlace where = optimizerOffloaded && shardG ? MemPlace::PinnedHost : MemPlace::Device;
    m.gradientAccumulator = {shardG ? pad.trainableShard : pad.trainable, 4, where, shardG};
  }

  // Optimizer state: fp32, the shard from stage 1 on (the whole buffer at stage 0, where the
  // shard is the whole buffer), wherever offload_optimizer puts it.
  const MemPlace optPlace = offloadPlace(o.offloadOptimizer, o.pinOptimizer);
  const bool shardO = rules.shardOptimizer;
  const StatePlacement fp32State{shardO ? pad.trainableShard : pad.trainable, 4, optPlace, shardO};
  if (m.optimizer.masterWeights) m.masterWeights = fp32State;
  if (m.optimizer.moments > 0) m.moment = fp32State;
  // Both files would hold the same bits (an fp32 update writes the master value as the
  // parameter), and writing the second after every step adds 4 bytes a parameter to the
  // optimizer's 24 (three fp32 states in and out).
  if (o.paramAndOptimizerSwapShared && o.precision == DType::F32 && shardP && m.masterWeights.place == MemPlace::Nvme &&
      m.parameters.place == MemPlace::Nvme && m.masterWeights.elements == pad.trainableShard) {
    m.parametersInMaster = m.parameters.elements;
    m.parameters.elements = 0;
  }
  return m;
}

}  // namespace zrt
