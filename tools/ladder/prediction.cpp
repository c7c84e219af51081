#include "tools/ladder/prediction.h"

#include <array>
#include <filesystem>

#include "core/error.h"
#include "offload/block_size.h"
#include "offload/pinned_buffer_pool.h"
#include "tools/plan/config_input.h"
#include "tools/plan/strategy.h"
#include "tools/trainer/model/gpt2.h"

namespace zrt::ladder {

namespace {

trainer::Gpt2Shape gpt2Shape(const ModelShape& s) { return {s.layers, s.hidden, s.heads, s.seqLen, 256}; }

trainer::LoraConfig loraConfig(const LoraSettings& lora) {
  trainer::LoraConfig c;
  c.rank = lora.rank;
  c.alpha = lora.alpha;
  std::string list;
  for (const std::string& t : lora.targets) list += (list.empty() ? "" : ",") + t;
  c.targets = trainer::parseLoraTargets(list);
  return c;
}

// The registration as zrt-plan's model, each tensor in its module.
plan::ModelSpec planModelOf(const EngineModel& model) {
  plan::ModelSpec spec;
  for (const ModuleSpec& m : model.modules)
    for (const ParamSpec& p : m.params) {
      plan::TensorSpec t;
      t.name = p.name;
      for (std::int64_t d : p.shape) t.shape.push_back(static_cast<std::uint64_t>(d));
      t.trainable = p.trainable;
      t.module = m.name;
      spec.tensors.push_back(std::move(t));
    }
  return spec;
}

}  // namespace

plan::ModelSpec gpt2PlanModel(const ModelShape& shape) {
  plan::ModelSpec spec = planModelOf(trainer::gpt2Model(gpt2Shape(shape), 0));
  spec.shape = plan::TransformerShape{static_cast<std::uint64_t>(shape.layers),
                                      static_cast<std::uint64_t>(shape.hidden),
                                      static_cast<std::uint64_t>(shape.heads), 256};
  spec.source = detail::cat("zrt-train GPT-2 ", shape.layers, " x ", shape.hidden, ", ", shape.heads,
                            " heads, T ", shape.seqLen);
  return spec;
}

plan::ModelSpec gpt2LoraPlanModel(const ModelShape& shape, const LoraSettings& lora) {
  const trainer::LoraConfig config = loraConfig(lora);
  plan::ModelSpec m = planModelOf(trainer::gpt2Model(gpt2Shape(shape), 0, config));
  m.shape = gpt2PlanModel(shape).shape;
  m.loraRank = static_cast<std::uint64_t>(lora.rank);
  m.loraTargets = lora.targets;
  m.loraAdaptedTensors = static_cast<std::uint64_t>(shape.layers) * config.targets.size();
  m.source = gpt2PlanModel(shape).source + detail::cat(" + LoRA r=", lora.rank);
  return m;
}

Prediction predict(const LadderSpec& spec, const Rung& rung, const std::filesystem::path& config) {
  plan::PlanInputs in;
  in.model = gpt2PlanModel(spec.model);
  if (rung.strategy.lora) in.loraModel = gpt2LoraPlanModel(spec.model, spec.lora);
  in.hardware.worldSize = spec.ranks;
  in.hardware.ranksPerNode = spec.ranks;
  in.hardware.deviceBytes = spec.budgetBytes;
  // zrt-train runs on the host device: its pinned pools move into huge pages, and its swap
  // files live under the NVMe rung's directory.
  in.hardware.pinnedHugePageBytes = offload::transparentHugePageBytes();
  if (!spec.nvmePath.empty()) in.hardware.nvmeBlockBytes = offload::logicalBlockSize(spec.nvmePath);
  in.training.seqLen = static_cast<std::uint64_t>(spec.model.seqLen);
  double momentum = 0;
  plan::applyConfigFile(config, plan::GivenFlags{}, in, momentum);
  const trainer::Gpt2Shape shape = gpt2Shape(spec.model);
  const trainer::LoraConfig lora = loraConfig(spec.lora);
  const DType dtype = in.training.precision;
  in.activationModel = plan::ActivationModel{
      "zrt-train's own buffers (gpt2ActivationBytes: fp32, backward scratch included)",
      [shape, lora, dtype](const plan::Strategy& s) {
        trainer::Gpt2Options o;
        o.activationCheckpointing = s.checkpointing;
        if (s.lora) o.lora = lora;
        const trainer::Gpt2ActivationBytes b =
            trainer::gpt2ActivationBytes(shape, o, static_cast<int>(s.microBatch), dtype);
        std::array<std::uint64_t, kNumMemPlaces> bytes{};
        bytes[static_cast<int>(MemPlace::Device)] = b.device;
        bytes[static_cast<int>(MemPlace::PinnedHost)] = b.pinnedHost;
        return bytes;
      }};
  const plan::Evaluation e = plan::evaluate(in, rung.strategy);
  Prediction p;
  p.trainable = e.trainable;
  p.frozen = e.frozen;
  for (int t = 0; t < kNumMemTags; ++t)
    for (int pl = 0; pl < kNumMemPlaces; ++pl) {
      const auto tag = static_cast<MemTag>(t);
      const auto place = static_cast<MemPlace>(pl);
      p.bytes.add(tag, place, e.ledger.byTag(tag, place));
    }
  return p;
}

}  // namespace zrt::ladder
