#include "tools/ladder/prediction.h"

#include <string_view>

#include "core/error.h"
#include "tools/plan/config_input.h"
#include "tools/plan/strategy.h"
#include "tools/trainer/model/gpt2.h"

namespace zrt::ladder {

namespace {

// zrt-train's --lora-targets names and the weight each adapts (tools/trainer/model/lora.h).
struct LoraTarget {
  std::string_view name;
  std::string_view weight;  // the block parameter's name after "h.{i}."
};
constexpr LoraTarget kLoraTargets[] = {
    {"qkv", "attn.c_attn.weight"},
    {"proj", "attn.c_proj.weight"},
    {"fc", "mlp.c_fc.weight"},
    {"mlp_proj", "mlp.c_proj.weight"},
};

const LoraTarget& loraTarget(const std::string& name) {
  for (const LoraTarget& t : kLoraTargets)
    if (t.name == name) return t;
  std::string known;
  for (const LoraTarget& t : kLoraTargets) known += (known.empty() ? "" : ", ") + std::string(t.name);
  ZRT_THROW(InvalidArgument, "--lora-targets: unknown layer '", name, "' (known: ", known, ")");
}

}  // namespace

plan::ModelSpec gpt2PlanModel(const ModelShape& shape) {
  const trainer::Gpt2Shape g{shape.layers, shape.hidden, shape.heads, shape.seqLen, 256};
  const EngineModel model = trainer::gpt2Model(g, 0);
  plan::ModelSpec spec;
  for (const ModuleSpec& m : model.modules)
    for (const ParamSpec& p : m.params) {
      plan::TensorSpec t;
      t.name = p.name;
      for (std::int64_t d : p.shape) t.shape.push_back(static_cast<std::uint64_t>(d));
      t.trainable = p.trainable;
      spec.tensors.push_back(std::move(t));
    }
  spec.shape = plan::TransformerShape{static_cast<std::uint64_t>(shape.layers),
                                      static_cast<std::uint64_t>(shape.hidden),
                                      static_cast<std::uint64_t>(shape.heads), 256};
  spec.source = detail::cat("zrt-train GPT-2 ", shape.layers, " x ", shape.hidden, ", ", shape.heads,
                            " heads, T ", shape.seqLen);
  return spec;
}

plan::ModelSpec gpt2LoraPlanModel(const plan::ModelSpec& base, const LoraSettings& lora) {
  std::vector<const LoraTarget*> targets;
  for (const std::string& name : lora.targets) targets.push_back(&loraTarget(name));
  const auto r = static_cast<std::uint64_t>(lora.rank);
  plan::ModelSpec m = base;
  m.tensors.clear();
  m.loraRank = r;
  m.loraTargets = lora.targets;
  m.loraAdaptedTensors = 0;
  for (const plan::TensorSpec& t : base.tensors) {
    plan::TensorSpec frozen = t;
    frozen.trainable = false;
    m.tensors.push_back(frozen);
  }
  // Adapters after the base tensors: the order does not change any count the planner makes.
  for (const plan::TensorSpec& t : base.tensors)
    for (const LoraTarget* target : targets) {
      // "h.{i}." + weight: a block's adapted layer.
      const std::string_view name = t.name;
      if (!name.starts_with("h.") || !name.ends_with(target->weight) || t.shape.size() != 2) continue;
      const std::string_view prefix = name.substr(0, name.size() - target->weight.size());
      if (prefix.find('.', 2) != prefix.size() - 1) continue;
      const std::uint64_t in = t.shape[0], out = t.shape[1];
      const std::string stem(name.substr(0, name.size() - 7));  // without ".weight"
      m.tensors.push_back({stem + ".lora_A.weight", {r, in}, true});
      m.tensors.push_back({stem + ".lora_B.weight", {out, r}, true});
      ++m.loraAdaptedTensors;
    }
  m.source = base.source + detail::cat(" + LoRA r=", r);
  return m;
}

Prediction predict(const LadderSpec& spec, const Rung& rung, const std::filesystem::path& config) {
  plan::PlanInputs in;
  in.model = gpt2PlanModel(spec.model);
  if (rung.strategy.lora) in.loraModel = gpt2LoraPlanModel(in.model, spec.lora);
  in.hardware.worldSize = spec.ranks;
  in.hardware.ranksPerNode = spec.ranks;
  in.hardware.deviceBytes = spec.budgetBytes;
  in.training.seqLen = static_cast<std::uint64_t>(spec.model.seqLen);
  double momentum = 0;
  plan::applyConfigFile(config, plan::GivenFlags{}, in, momentum);
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
