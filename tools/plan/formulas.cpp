#include "tools/plan/formulas.h"

#include <algorithm>

#include "offload/pinned_buffer_pool.h"
#include "core/shard.h"
#include "tools/plan/checked_math.h"
#include "core/error.h"

namespace zrt::plan {

std::string_view purposeName(Purpose p) {
  switch (p) {
    case Purpose::Parameters: return "parameters";
    case Purpose::Gradients: return "gradients";
    case Purpose::MasterWeights: return "master weights";
    case Purpose::OptimizerMoments: return "optimizer moments";
    case Purpose::CommBuckets: return "comm buckets";
    case Purpose::GatheredParams: return "gathered params";
    case Purpose::SwapBuffers: return "swap buffers";
    case Purpose::Activations: return "activations";
    case Purpose::Reserve: return "reserve";
  }
  return "?";
}

MemTag memTagOf(Purpose p) {
  switch (p) {
    case Purpose::Parameters: return MemTag::Parameters;
    case Purpose::Gradients: return MemTag::Gradients;
    case Purpose::MasterWeights:
    case Purpose::OptimizerMoments: return MemTag::OptimizerState;
    case Purpose::CommBuckets: return MemTag::CommBuckets;
    case Purpose::GatheredParams: return MemTag::GatheredParameters;
    case Purpose::SwapBuffers: return MemTag::SwapBuffers;
    case Purpose::Activations: return MemTag::Activations;
    case Purpose::Reserve: return MemTag::Other;
  }
  return MemTag::Other;
}

bool isModelState(Purpose p) {
  return p == Purpose::Parameters || p == Purpose::Gradients || p == Purpose::MasterWeights ||
         p == Purpose::OptimizerMoments;
}

void PlanLedger::add(Purpose p, MemPlace place, std::uint64_t bytes) {
  cells[static_cast<int>(p)][static_cast<int>(place)] += bytes;
}

std::uint64_t PlanLedger::get(Purpose p, MemPlace place) const {
  return cells[static_cast<int>(p)][static_cast<int>(place)];
}

std::uint64_t PlanLedger::total(MemPlace place) const {
  std::uint64_t n = 0;
  for (int p = 0; p < kNumPurposes; ++p) n += cells[p][static_cast<int>(place)];
  return n;
}

std::uint64_t PlanLedger::hostTotal() const {
  return total(MemPlace::PinnedHost) + total(MemPlace::Host);
}

std::uint64_t PlanLedger::modelStates(MemPlace place) const {
  std::uint64_t n = 0;
  for (int p = 0; p < kNumPurposes; ++p)
    if (isModelState(static_cast<Purpose>(p))) n += cells[p][static_cast<int>(place)];
  return n;
}

std::uint64_t PlanLedger::byTag(MemTag tag, MemPlace place) const {
  std::uint64_t n = 0;
  for (int p = 0; p < kNumPurposes; ++p)
    if (memTagOf(static_cast<Purpose>(p)) == tag) n += cells[p][static_cast<int>(place)];
  return n;
}

// ---- Model states -------------------------------------------------------------------------

ModelStatePlacement modelStatePlacement(const ModelStateInputs& in) {
  return placeModelStates(in, in.trainable, in.frozen);
}

PlanLedger modelStateBytes(const ModelStatePlacement& m) {
  PlanLedger l;
  auto add = [&l](Purpose p, const StatePlacement& s, std::uint64_t copies = 1) {
    l.add(p, s.place, copies * s.bytes());
  };
  add(Purpose::Parameters, m.parameters);
  add(Purpose::Parameters, m.frozenParameters);
  add(Purpose::Parameters, m.parametersInCpu);
  add(Purpose::Parameters, m.frozenParametersInCpu);
  add(Purpose::Gradients, m.gradients);
  add(Purpose::Gradients, m.gradientHostShard);
  add(Purpose::Gradients, m.gradientAccumulator);
  add(Purpose::MasterWeights, m.masterWeights);
  add(Purpose::OptimizerMoments, m.moment, static_cast<std::uint64_t>(m.optimizer.moments));
  return l;
}

PlanLedger modelStateBytes(const ModelStateInputs& in) {
  return modelStateBytes(modelStatePlacement(in));
}

double zeroPaperBytes(std::uint64_t psi, int stage, int worldSize, std::uint64_t paramBytes,
                      std::uint64_t k) {
  const double P = static_cast<double>(psi), N = worldSize, pb = static_cast<double>(paramBytes),
               K = static_cast<double>(k);
  switch (stage) {
    case 0: return (pb + pb + K) * P;
    case 1: return pb * P + pb * P + K * P / N;
    case 2: return pb * P + (pb + K) * P / N;
    case 3: return (pb + pb + K) * P / N;
    default: break;
  }
  ZRT_THROW(InvalidArgument, "ZeRO stage ", stage, " does not exist");
}

// ---- Activations ----------------------------------------------------------------------------

std::uint64_t layerActivationBytes(const ActivationInputs& in) {
  const std::uint64_t s = in.seqLen, b = in.microBatch, h = in.shape.hidden, a = in.shape.heads;
  constexpr std::string_view what = "the activation estimate (sbh(34 + 5as/h))";
  const std::uint64_t scale = in.precision == DType::F32 ? 2 : 1;
  return checkedProduct(
      {scale, checkedSum({checkedProduct({34, s, b, h}, what),
                          in.flashAttention ? 0 : checkedProduct({5, a, s, s, b}, what)},
                         what)},
      what);
}

std::uint64_t activationBytes(const ActivationInputs& in) {
  const std::uint64_t s = in.seqLen, b = in.microBatch, h = in.shape.hidden, L = in.shape.layers;
  constexpr std::string_view what = "the activation estimate";
  const std::uint64_t scale = in.precision == DType::F32 ? 2 : 1;
  const std::uint64_t lora =
      checkedProduct({scale, in.loraAdaptersPerLayer, 2, s, b, in.loraRank}, what);
  const std::uint64_t layer = checkedSum({layerActivationBytes(in), lora}, what);
  const std::uint64_t logits = checkedProduct({4, s, b, in.shape.vocab}, what);
  if (!in.checkpointing) return checkedSum({checkedProduct({L, layer}, what), logits}, what);
  return checkedSum({checkedProduct({L, scale, 2, s, b, h}, what), layer, logits}, what);
}

// ---- Buffers --------------------------------------------------------------------------------

PlanLedger bufferBytes(const BufferInputs& in) {
  PlanLedger l;
  const std::uint64_t p = dtypeSize(in.precision);
  const ZeroConfig& z = in.zero;
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)); };
  if (in.padded.trainable > 0) {
    const std::uint64_t buckets = in.overlapComm ? 2 : 1;
    l.add(Purpose::CommBuckets, MemPlace::Device,
          buckets * std::min(u(z.reduce_bucket_size), in.padded.trainable) * p);
  }
  if (in.stage == 3) {
    const std::uint64_t all = in.padded.trainable + in.padded.frozen;
    // Gathers posted ahead by the trace count toward the live bound (partition/param_coordinator.h).
    const std::uint64_t live = std::max(u(z.stage3_max_live_parameters), in.largestTensor);
    l.add(Purpose::GatheredParams, MemPlace::Device, std::min(all, live) * p);
  }
  // Swap buffers come from offload's PinnedBufferPool, which rounds each one up to
  // kPinnedBufferAlignment bytes.
  auto pinnedBuffers = [](std::int64_t count, std::uint64_t bytes) {
    const std::uint64_t a = offload::kPinnedBufferAlignment;
    return checkedProduct({static_cast<std::uint64_t>(count), (bytes + a - 1) / a * a},
                          "the swap buffers (buffer_count · buffer bytes)");
  };
  if (in.offloadOptimizer == OffloadDevice::Nvme) {
    const std::uint64_t group = paddedLength(std::min(u(z.sub_group_size), in.padded.trainableShard), 1,
                                             kShardAlignElements);
    l.add(Purpose::SwapBuffers, MemPlace::PinnedHost,
          pinnedBuffers(z.offload_optimizer.buffer_count, group * 4));
  }
  if (in.offloadParam == OffloadDevice::Nvme) {
    l.add(Purpose::SwapBuffers, MemPlace::PinnedHost,
          pinnedBuffers(z.offload_param.buffer_count,
                        checkedProduct({u(z.offload_param.buffer_size), p}, "offload_param.buffer_size · p")));
  }
  return l;
}

// ---- Step time ------------------------------------------------------------------------------

StepTime stepTime(const StepTimeInputs& in) {
  StepTime t;
  const Hardware& hw = in.hardware;
  const double tokens = static_cast<double>(in.tokensPerStep);
  const double all = static_cast<double>(in.total), trainable = static_cast<double>(in.trainable);
  t.compute = (4 * all + 2 * trainable) * tokens / hw.flops;
  if (in.checkpointing) t.recompute = 2 * all * tokens / hw.flops;

  const double p = static_cast<double>(dtypeSize(in.precision));
  const double N = hw.worldSize;
  const double ring = (N - 1) / N;
  const double g = static_cast<double>(in.gradAccum);
  const double Pt = static_cast<double>(in.padded.trainable);
  const double Pall = static_cast<double>(in.padded.trainable + in.padded.frozen);
  const double gathers = in.checkpointing ? 3 : 2;  // forward, backward (, recompute)
  switch (in.stage) {
    case 0:
    case 1: t.commBytes = 2 * Pt * p * ring; break;  // all-reduce, or reduce-scatter + all-gather
    case 2: t.commBytes = (g + 1) * Pt * p * ring; break;  // reduce-scatter per micro-batch
    case 3: t.commBytes = g * (gathers * Pall + Pt) * p * ring; break;
    default: break;
  }
  t.comm = t.commBytes / hw.netBps;

  const double St = static_cast<double>(in.padded.trainableShard);
  const double Sall = static_cast<double>(in.padded.trainableShard + in.padded.frozenShard);
  const double K = static_cast<double>(in.optimizerBytesPerParam);
  const double rpn = hw.ranksPerNode;
  if (in.offloadOptimizer != OffloadDevice::None) {
    // Gradient shard down (per micro-batch once gradients are sharded), updated 16-bit shard up.
    t.pcieBytes += (in.stage >= 2 ? g : 1) * St * p + St * p;
    // The CPU optimizer reads the gradients, reads and writes master and moments, writes the
    // 16-bit parameters, for every rank of the node.
    t.cpuBytes = rpn * St * (p + 2 * K + p);
    if (in.offloadOptimizer == OffloadDevice::Nvme) {
      t.nvmeReadBytes += rpn * K * St;
      t.nvmeWriteBytes += rpn * K * St;
    }
  }
  if (in.offloadParam != OffloadDevice::None) {
    t.pcieBytes += g * gathers * Sall * p;  // each gather starts from the host shard
    if (in.offloadOptimizer == OffloadDevice::None) t.pcieBytes += St * p;
    if (in.offloadParam == OffloadDevice::Nvme) {
      t.nvmeReadBytes += rpn * g * gathers * Sall * p;
      t.nvmeWriteBytes += rpn * St * p;
    }
  }
  t.pcie = t.pcieBytes / hw.pcieBps;
  t.cpuOptimizer = t.cpuBytes / hw.hostMemBps;
  t.nvme = t.nvmeReadBytes / hw.nvmeReadBps + t.nvmeWriteBytes / hw.nvmeWriteBps;
  return t;
}

}  // namespace zrt::plan
