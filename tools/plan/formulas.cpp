#include "tools/plan/formulas.h"

#include <algorithm>

#include "comm/bucket_plan.h"
#include "comm/gradient_bucketer.h"
#include "core/error.h"
#include "core/shard.h"
#include "offload/pinned_buffer_pool.h"
#include "runtime/optimizer_swapper.h"
#include "tools/plan/checked_math.h"

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
    case Purpose::GradientWorkspace: return "gradient workspace";
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
    case Purpose::GradientWorkspace: return MemTag::Other;
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

namespace {

std::uint64_t nonNegative(std::int64_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)); }

}  // namespace

std::uint64_t largestReduceBucket(const BufferInputs& in) {
  const std::uint64_t bucket = std::max<std::uint64_t>(1, nonNegative(in.zero.reduce_bucket_size));
  if (in.trainableTensors.empty()) return std::min(bucket, in.padded().trainable);
  const std::vector<std::size_t> numels(in.trainableTensors.begin(), in.trainableTensors.end());
  return comm::planGradientBuckets(numels, static_cast<std::size_t>(bucket)).maxBucketNumel;
}

namespace {

// Comm buckets: the gradient bucketer's memory for the Engine (which gives it the gradient
// buffer as its output and its device): the staging buffers (the communicator's, in
// kBucketMemoryPlace) and the accumulation receive buffers when micro-steps add up in it (on the
// device).
struct ReduceBuckets {
  std::uint64_t staging = 0;
  std::uint64_t receive = 0;
};
ReduceBuckets reduceBucketBytes(const BufferInputs& in) {
  const Padded& pd = in.padded();
  if (pd.trainable == 0) return {};
  const std::uint64_t bucket = std::max<std::uint64_t>(1, nonNegative(in.zero.reduce_bucket_size));
  // The Engine accumulates in the bucketer from the second micro-step on at stages 2-3, unless
  // the fp32 accumulator takes the sum (runtime/sharded_gradients.cpp).
  const bool accumulates = in.stage >= 2 && in.gradAccum > 1 && in.placement.gradientAccumulator.elements == 0;
  if (in.trainableTensors.empty()) {
    // Tensors not known (a bare parameter count): as if every tensor were small, buckets of
    // min(reduce_bucket_size, Ψ'), and a receive buffer of at most the shard per staging buffer.
    if (in.stage < 2) return {};
    const std::uint64_t slots = in.overlapComm ? 2 : 1, p = dtypeSize(in.precision);
    const std::uint64_t staging = checkedProduct({slots, largestReduceBucket(in), p}, "the reduce buckets");
    const std::uint64_t receive = checkedProduct({slots, std::min(bucket, pd.trainableShard), p}, "the reduce buckets");
    return {staging, accumulates ? receive : 0};
  }
  const std::vector<std::size_t> numels(in.trainableTensors.begin(), in.trainableTensors.end());
  const comm::GradBucketPlan plan = comm::planGradientBuckets(numels, static_cast<std::size_t>(bucket));
  const comm::BucketerMemory m = comm::bucketerMemory(plan, in.stage, in.overlapComm, in.precision,
                                                      /*callerOutput=*/true, in.worldSize, in.rank);
  return {m.buffers, accumulates ? m.accumulation : 0};
}

// Stage 3's gathered copies (partition/param_coordinator.h).
std::uint64_t gatheredElements(const BufferInputs& in) {
  const ZeroConfig& z = in.zero;
  const std::uint64_t maxLive = nonNegative(z.stage3_max_live_parameters);
  if (in.modules.empty()) {
    const std::uint64_t all = in.padded().trainable + in.padded().frozen;
    return std::min(all, std::max(maxLive, in.largestTensor));
  }
  const std::uint64_t threshold = nonNegative(z.stage3_param_persistence_threshold);
  std::uint64_t persistent = 0, others = 0;
  for (const ModuleSize& m : in.modules) (m.elements() < threshold ? persistent : others) += m.elements();
  return persistent + std::min(others, maxLive);
}

// offload_param nvme: the coordinator's staging buffers, sized for the largest piece of a module
// this rank reads from NVMe (partition/param_coordinator.cpp, its constructor).
std::uint64_t parameterStagingBytes(const BufferInputs& in, std::uint64_t p) {
  const ModelStatePlacement& pl = in.placement;
  const Padded& pd = pl.padded;
  const std::uint64_t count = static_cast<std::uint64_t>(std::max(1, in.zero.offload_param.buffer_count));
  // A shard's NVMe part has a swap file, whose reads need up to two alignments of room; a shard
  // wholly in host memory has none (ParamShardStore::stagingBytes with alignment 1).
  const std::uint64_t trainableAlign = pl.parameters.elements ? in.nvmeBlockBytes : 1;
  const std::uint64_t frozenAlign = pl.frozenParameters.elements ? in.nvmeBlockBytes : 1;
  const std::uint64_t trainableInCpu = pl.parametersInCpu.elements, frozenInCpu = pl.frozenParametersInCpu.elements;
  std::uint64_t trainable = 0, frozen = 0;
  if (in.modules.empty()) {
    const std::uint64_t piece = std::min(nonNegative(in.zero.offload_param.buffer_size), pd.trainableShard);
    if (pl.parameters.elements == 0) return 0;
    trainable = piece * p + 2 * trainableAlign;
  } else {
    std::uint64_t trainableAt = 0, frozenAt = 0;
    bool any = false;
    for (const ModuleSize& m : in.modules) {
      const GatherPieces tp = gatherPieces(trainableAt, m.trainable, pd.trainableShard, in.worldSize, in.rank);
      const GatherPieces fp = gatherPieces(frozenAt, m.frozen, pd.frozenShard, in.worldSize, in.rank);
      trainableAt += m.trainable;
      frozenAt += m.frozen;
      const std::uint64_t tn = tp.counts[static_cast<std::size_t>(in.rank)];
      const std::uint64_t fn = fp.counts[static_cast<std::size_t>(in.rank)];
      const bool reads = (tn > 0 && tp.sendOffset + tn > trainableInCpu) || (fn > 0 && fp.sendOffset + fn > frozenInCpu);
      if (!reads) continue;
      any = true;
      trainable = std::max(trainable, tn * p + 2 * trainableAlign);
      frozen = std::max(frozen, fn * p + 2 * frozenAlign);
    }
    if (!any) return 0;
  }
  const std::uint64_t a = offload::kPinnedBufferAlignment;
  return checkedProduct({count, checkedSum({(trainable + a - 1) / a * a, frozen}, "a staging buffer")},
                        "the parameter staging buffers (buffer_count · buffer bytes)");
}

}  // namespace

PlanLedger bufferBytes(const BufferInputs& in) {
  PlanLedger l;
  const std::uint64_t p = dtypeSize(in.precision);
  const Padded& pd = in.padded();
  if (in.stage >= 2) {
    const ReduceBuckets rb = reduceBucketBytes(in);
    l.add(Purpose::CommBuckets, comm::kBucketMemoryPlace, rb.staging);
    l.add(Purpose::CommBuckets, MemPlace::Device, rb.receive);
  }
  if (pd.trainable > 0 && !in.modules.empty()) {
    std::uint64_t widest = 0;
    for (const ModuleSize& m : in.modules) widest = std::max(widest, m.trainable);
    l.add(Purpose::GradientWorkspace, MemPlace::Device, checkedProduct({widest, p}, "the gradient workspace"));
  }
  if (in.stage == 3)
    l.add(Purpose::GatheredParams, MemPlace::Device, checkedProduct({gatheredElements(in), p}, "the gathered parameters"));
  if (in.offloadOptimizer == OffloadDevice::Nvme) {
    const OptimizerStateSpec& o = in.placement.optimizer;
    const std::uint64_t states = (o.masterWeights ? 1 : 0) + static_cast<std::uint64_t>(o.moments);
    const std::uint64_t subGroupSize = std::max<std::uint64_t>(1, nonNegative(in.zero.sub_group_size));
    const std::uint64_t group = OptimizerSwapper::subGroupElements(pd.trainableShard, subGroupSize);
    const std::uint64_t buffer = checkedProduct({group, 4, states}, "an optimizer swap buffer (sub-group · 4 · states)");
    l.add(Purpose::SwapBuffers, MemPlace::PinnedHost,
          offload::pinnedPoolBytes(
              OptimizerSwapper::buffersUsed(pd.trainableShard, subGroupSize, in.zero.offload_optimizer.buffer_count),
              static_cast<std::size_t>(buffer), static_cast<std::size_t>(in.hugePageBytes)));
  }
  if (in.offloadParam == OffloadDevice::Nvme && in.stage == 3)
    l.add(Purpose::SwapBuffers, MemPlace::PinnedHost, parameterStagingBytes(in, p));
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
