#include "tools/plan/strategy.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "core/error.h"
#include "tools/plan/checked_math.h"

namespace zrt::plan {

std::string Strategy::id() const {
  std::string s = detail::cat("z", stage);
  if (offloadOptimizer != OffloadDevice::None || offloadParam != OffloadDevice::None) {
    s += detail::cat("-", nameOf(offloadOptimizer));
    if (offloadParam != OffloadDevice::None) s += detail::cat("+", nameOf(offloadParam));
  }
  if (checkpointing) s += "-ckpt";
  if (lora) s += "-lora";
  return s;
}

std::string Strategy::describe() const {
  return detail::cat("ZeRO stage ", stage, ", offload_optimizer ", nameOf(offloadOptimizer),
                     ", offload_param ", nameOf(offloadParam),
                     ", activation checkpointing ", checkpointing ? "on" : "off", ", LoRA ",
                     lora ? "on" : "off", ", micro-batch ", microBatch, " x ", gradAccum,
                     " accumulation steps");
}

std::string gigabytes(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

Evaluation evaluate(const PlanInputs& in, const Strategy& s) {
  ZRT_ENFORCE(!s.lora || in.loraModel.has_value(), "LoRA strategy without a LoRA model");
  const ModelSpec& model = s.lora ? *in.loraModel : in.model;
  const Hardware& hw = in.hardware;
  const Training& tr = in.training;

  Evaluation e;
  e.strategy = s;
  e.trainable = model.trainableParams();
  e.frozen = model.frozenParams();

  ModelStateInputs ms;
  ms.trainable = e.trainable;
  ms.frozen = e.frozen;
  ms.stage = s.stage;
  ms.worldSize = hw.worldSize;
  ms.rank = 0;
  ms.precision = tr.precision;
  ms.optimizer = tr.optimizer;
  ms.sgdMomentum = tr.sgdMomentum;
  ms.offloadOptimizer = s.offloadOptimizer;
  ms.pinOptimizer = tr.zero.offload_optimizer.pin_memory;
  ms.offloadParam = s.offloadParam;
  ms.pinParam = tr.zero.offload_param.pin_memory;
  ms.maxInCpu = static_cast<std::uint64_t>(std::max<std::int64_t>(0, tr.zero.offload_param.max_in_cpu));
  // As modelStateOptions() decides it; a config written for the strategy gives both tiers the
  // same --nvme-path unless the training config set them.
  ms.paramAndOptimizerSwapShared = s.offloadParam == OffloadDevice::Nvme && s.offloadOptimizer == OffloadDevice::Nvme &&
                                   tr.zero.offload_param.nvme_path == tr.zero.offload_optimizer.nvme_path;
  // Only whether it exceeds 1 matters (the fp32 accumulator of 16-bit training).
  ms.accumulationSteps = static_cast<int>(std::min<std::uint64_t>(s.gradAccum, 1u << 30));
  e.placement = modelStatePlacement(ms);
  e.ledger = modelStateBytes(e.placement);

  if (in.activationModel) {
    e.activationsKnown = true;
    const std::array<std::uint64_t, kNumMemPlaces> acts = in.activationModel->bytes(s);
    for (int pl = 0; pl < kNumMemPlaces; ++pl) e.ledger.add(Purpose::Activations, static_cast<MemPlace>(pl), acts[pl]);
  } else if (model.shape) {
    e.activationsKnown = true;
    ActivationInputs ai;
    ai.shape = *model.shape;
    ai.seqLen = tr.seqLen;
    ai.microBatch = s.microBatch;
    ai.precision = tr.precision;
    ai.checkpointing = s.checkpointing;
    ai.flashAttention = tr.flashAttention;
    ai.loraRank = model.loraRank;
    ai.loraAdaptersPerLayer = model.shape->layers ? model.loraAdaptedTensors / model.shape->layers : 0;
    e.ledger.add(Purpose::Activations, MemPlace::Device, activationBytes(ai));
  }

  BufferInputs bi;
  bi.placement = e.placement;
  bi.largestTensor = model.largestTensor();
  if (model.modulesKnown) bi.trainableTensors = model.trainableTensors();
  bi.modules = model.modules();
  bi.stage = s.stage;
  bi.worldSize = hw.worldSize;
  bi.rank = 0;
  bi.precision = tr.precision;
  bi.gradAccum = s.gradAccum;
  bi.hugePageBytes = hw.pinnedHugePageBytes;
  bi.nvmeBlockBytes = hw.nvmeBlockBytes;
  bi.offloadOptimizer = s.offloadOptimizer;
  bi.offloadParam = s.offloadParam;
  bi.zero = tr.zero;
  bi.overlapComm = tr.overlapComm.value_or(s.stage == 3);
  const PlanLedger buffers = bufferBytes(bi);
  if (s.stage >= 2) e.largestReduceBucket = largestReduceBucket(bi);
  for (int p = 0; p < kNumPurposes; ++p)
    for (int pl = 0; pl < kNumMemPlaces; ++pl)
      e.ledger.cells[p][pl] += buffers.cells[p][pl];
  e.ledger.add(Purpose::Reserve, MemPlace::Device, hw.reserveBytes);

  const std::uint64_t device = e.ledger.total(MemPlace::Device);
  const std::uint64_t hostNode = e.ledger.hostTotal() * static_cast<std::uint64_t>(hw.ranksPerNode);
  const std::uint64_t nvmeNode = e.ledger.total(MemPlace::Nvme) * static_cast<std::uint64_t>(hw.ranksPerNode);
  e.fitsDevice = device <= hw.deviceBytes;
  e.fitsHost = hostNode <= hw.hostBytes;
  e.fitsNvme = nvmeNode <= hw.nvmeBytes;
  if (!e.fitsDevice)
    e.problems.push_back(detail::cat("device needs ", gigabytes(device), " per rank, has ", gigabytes(hw.deviceBytes)));
  if (!e.fitsHost)
    e.problems.push_back(detail::cat("host needs ", gigabytes(hostNode), " per node, has ", gigabytes(hw.hostBytes)));
  if (!e.fitsNvme)
    e.problems.push_back(detail::cat("NVMe needs ", gigabytes(nvmeNode), " per node, has ", gigabytes(hw.nvmeBytes),
                                     hw.nvmeBytes == 0 ? " (give --nvme)" : ""));

  StepTimeInputs ti;
  ti.padded = e.padded();
  ti.trainable = e.trainable;
  ti.total = e.trainable + e.frozen;
  ti.tokensPerStep =
      checkedProduct({s.microBatch, s.gradAccum, tr.seqLen}, "tokens per step (b·accumulation·s)");
  ti.gradAccum = s.gradAccum;
  ti.stage = s.stage;
  ti.checkpointing = s.checkpointing;
  ti.precision = tr.precision;
  ti.optimizerBytesPerParam = e.k();
  ti.offloadOptimizer = s.offloadOptimizer;
  ti.offloadParam = s.offloadParam;
  ti.hardware = hw;
  e.time = stepTime(ti);
  return e;
}

std::string_view leverName(int level) {
  switch (level) {
    case kNoChange: return "no change";
    case kAccumulation: return "smaller micro-batch with gradient accumulation";
    case kCheckpointing: return "activation checkpointing";
    case kStage12: return "ZeRO stage 1/2 across ranks";
    case kStage3: return "ZeRO stage 3";
    case kCpuOffload: return "CPU offload";
    case kNvmeOffload: return "NVMe offload";
    case kAdapters: return "frozen base with LoRA adapters";
    default: break;
  }
  return "?";
}

namespace {

int offloadRank(OffloadDevice d) {
  return d == OffloadDevice::None ? 0 : d == OffloadDevice::Cpu ? 1 : 2;
}

}  // namespace

int leverLevel(const Strategy& base, const Strategy& s) {
  // Any change of a setting counts as pulling that setting's lever, also a change back (a lower
  // stage, offload removed): only the current strategy itself is "no change".
  int level = kNoChange;
  if (s.checkpointing != base.checkpointing) level = std::max(level, int(kCheckpointing));
  if (s.stage != base.stage) level = std::max(level, s.stage == 3 ? int(kStage3) : int(kStage12));
  if (s.offloadOptimizer != base.offloadOptimizer || s.offloadParam != base.offloadParam) {
    const int off = std::max(offloadRank(s.offloadOptimizer), offloadRank(s.offloadParam));
    level = std::max(level, off == 2 ? int(kNvmeOffload) : int(kCpuOffload));
  }
  if (s.lora != base.lora) level = std::max(level, int(kAdapters));
  return level;
}

std::vector<Strategy> candidateStrategies(const PlanInputs& in) {
  // The offload pairings the table shows; each stage lists those the stage rules allow.
  struct Off {
    OffloadDevice opt, param;
  };
  const Off offs[] = {{OffloadDevice::None, OffloadDevice::None},
                      {OffloadDevice::Cpu, OffloadDevice::None},
                      {OffloadDevice::Cpu, OffloadDevice::Cpu},
                      {OffloadDevice::Nvme, OffloadDevice::None},
                      {OffloadDevice::Nvme, OffloadDevice::Nvme}};
  const bool shapes = in.model.shape.has_value();
  std::vector<Strategy> out;
  auto push = [&](const Strategy& s) {
    for (const auto& o : out)
      if (o.id() == s.id()) return;
    out.push_back(s);
  };
  for (int lora = 0; lora <= (in.loraModel ? 1 : 0); ++lora)
    for (int ckpt = 0; ckpt <= (shapes ? 1 : 0); ++ckpt)
      for (int stage = 0; stage <= 3; ++stage)
        for (const Off& o : offs) {
          if (!offloadAllowed(stage, o.opt, o.param)) continue;
          Strategy s = in.baseline;
          s.stage = stage;
          s.offloadOptimizer = o.opt;
          s.offloadParam = o.param;
          s.checkpointing = ckpt != 0;
          s.lora = lora != 0;
          push(s);
        }
  push(in.baseline);
  std::stable_sort(out.begin(), out.end(), [](const Strategy& a, const Strategy& b) {
    return std::tuple(a.lora, a.checkpointing, a.stage) < std::tuple(b.lora, b.checkpointing, b.stage);
  });
  return out;
}

std::vector<std::uint64_t> divisorsDescending(std::uint64_t n) {
  ZRT_ENFORCE(n >= 1, "divisorsDescending(0)");
  std::vector<std::uint64_t> small, large;
  // Pairs (d, n / d) with d <= sqrt(n): O(sqrt(n)) steps, not O(n).
  for (std::uint64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d != n / d) large.push_back(n / d);
  }
  // `large` is already descending; `small` ascending.
  large.insert(large.end(), small.rbegin(), small.rend());
  return large;
}

Plan makePlan(const PlanInputs& in) {
  validateOffload(in.baseline.stage, in.baseline.offloadOptimizer, in.baseline.offloadParam);
  ZRT_ENFORCE(in.baseline.microBatch >= 1 && in.baseline.gradAccum >= 1);
  if (in.baseline.microBatch > kMaxMicroBatch) {
    ZRT_THROW(InvalidArgument, "micro-batch ", in.baseline.microBatch, " is above ", kMaxMicroBatch,
              " sequences per rank, more than any device holds (--micro-batch or the config's "
              "train_micro_batch_size_per_gpu)");
  }
  // The global batch in tokens must fit 64 bits: every accumulation split of it is evaluated.
  checkedProduct({in.baseline.microBatch, in.baseline.gradAccum, in.training.seqLen,
                  static_cast<std::uint64_t>(in.hardware.worldSize)},
                 "the global batch in tokens (micro-batch · accumulation · sequence · ranks)");
  Plan plan;
  plan.inputs = in;
  plan.baseline = evaluate(in, in.baseline);
  const double baseTime = plan.baseline.time.total();

  for (const Strategy& s : candidateStrategies(in)) {
    Candidate c;
    c.given = evaluate(in, s);
    c.level = leverLevel(in.baseline, s);
    // Smaller micro-batches that divide the given one keep the global batch exact.
    for (const std::uint64_t m : divisorsDescending(s.microBatch)) {
      Strategy t = s;
      t.microBatch = m;
      t.gradAccum = s.gradAccum * (s.microBatch / m);
      Evaluation e = m == s.microBatch ? c.given : evaluate(in, t);
      if (e.fits()) {
        if (m != s.microBatch) c.level = std::max(c.level, int(kAccumulation));
        c.slowdown = baseTime > 0 ? e.time.total() / baseTime - 1 : 0;
        c.fitting = std::move(e);
        break;
      }
    }
    plan.candidates.push_back(std::move(c));
  }

  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    if (!c.fitting) continue;
    if (!plan.recommended) {
      plan.recommended = i;
      continue;
    }
    const Candidate& r = plan.candidates[*plan.recommended];
    auto key = [](const Candidate& x) {
      return std::tuple(x.level, x.slowdown, -static_cast<double>(x.fitting->strategy.microBatch),
                        x.fitting->ledger.total(MemPlace::Device));
    };
    if (key(c) < key(r)) plan.recommended = i;
  }
  return plan;
}

}  // namespace zrt::plan
