// GPT-2's registration with the Engine: modules, names, shapes and initialisation, and the
// shape checks every other part relies on.
#include <cmath>
#include <string>

#include "core/error.h"
#include "tools/trainer/model/gpt2.h"

namespace zrt::trainer {

namespace {

// splitmix64's finaliser: neighbouring (seed, index) pairs give unrelated generator seeds, so
// parameter k of seed s does not repeat parameter k+1 of seed s-1.
std::uint64_t mix(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void validate(const Gpt2Shape& s) {
  if (s.layers < 1) ZRT_THROW(InvalidArgument, "gpt2: layers must be at least 1, got ", s.layers);
  if (s.hidden < 1) ZRT_THROW(InvalidArgument, "gpt2: hidden must be at least 1, got ", s.hidden);
  if (s.heads < 1) ZRT_THROW(InvalidArgument, "gpt2: heads must be at least 1, got ", s.heads);
  if (s.hidden % s.heads != 0)
    ZRT_THROW(InvalidArgument, "gpt2: hidden (", s.hidden, ") must be a multiple of heads (",
              s.heads, ")");
  if (s.seqLen < 1) ZRT_THROW(InvalidArgument, "gpt2: seqLen must be at least 1, got ", s.seqLen);
  // Tokens are bytes: a vocabulary larger than 256 could never be used, a smaller one is allowed
  // (inputs are then checked against it).
  if (s.vocab < 1 || s.vocab > 256)
    ZRT_THROW(InvalidArgument, "gpt2: vocab must be in [1, 256] (tokens are bytes), got ", s.vocab);
  // Every activation index is computed in 64 bits, but BLAS takes int dimensions: 4 x hidden
  // (the MLP's width) must fit.
  if (s.hidden > (1 << 28))
    ZRT_THROW(InvalidArgument, "gpt2: hidden ", s.hidden, " is too large for BLAS's int sizes");
}

EngineModel gpt2Model(const Gpt2Shape& s, std::uint64_t seed, const LoraConfig& lora) {
  validate(s);
  if (lora.enabled()) validate(lora, s.hidden);
  const std::int64_t C = s.hidden;
  const double stddev = 0.02;
  // GPT-2 scales the residual projections by 1/sqrt(2 x layers): two per block add to the stream.
  const double projStddev = 0.02 / std::sqrt(2.0 * s.layers);
  std::uint64_t index = 0;
  auto param = [&](std::string name, std::vector<std::int64_t> shape, Initializer init) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.init = std::move(init);
    ++index;  // constants take an index too, so a parameter's seed does not depend on them
    return p;
  };
  auto normal = [&](std::string name, std::vector<std::int64_t> shape, double sd) {
    return param(std::move(name), std::move(shape), init::normal(mix(seed, index), sd));
  };
  auto constant = [&](std::string name, std::vector<std::int64_t> shape, float v) {
    return param(std::move(name), std::move(shape), init::constant(v));
  };

  EngineModel model;
  model.modules.push_back(ModuleSpec{"embed",
                                     {normal("wte.weight", {s.vocab, C}, stddev),
                                      normal("wpe.weight", {s.seqLen, C}, stddev)}});
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    ModuleSpec m{"h." + std::to_string(i), {}};
    m.params.push_back(constant(p + "ln_1.weight", {C}, 1.0f));
    m.params.push_back(constant(p + "ln_1.bias", {C}, 0.0f));
    m.params.push_back(normal(p + "attn.c_attn.weight", {C, 3 * C}, stddev));
    m.params.push_back(constant(p + "attn.c_attn.bias", {3 * C}, 0.0f));
    m.params.push_back(normal(p + "attn.c_proj.weight", {C, C}, projStddev));
    m.params.push_back(constant(p + "attn.c_proj.bias", {C}, 0.0f));
    m.params.push_back(constant(p + "ln_2.weight", {C}, 1.0f));
    m.params.push_back(constant(p + "ln_2.bias", {C}, 0.0f));
    m.params.push_back(normal(p + "mlp.c_fc.weight", {C, 4 * C}, stddev));
    m.params.push_back(constant(p + "mlp.c_fc.bias", {4 * C}, 0.0f));
    m.params.push_back(normal(p + "mlp.c_proj.weight", {4 * C, C}, projStddev));
    m.params.push_back(constant(p + "mlp.c_proj.bias", {C}, 0.0f));
    model.modules.push_back(std::move(m));
  }
  model.modules.push_back(ModuleSpec{
      "ln_f", {constant("ln_f.weight", {C}, 1.0f), constant("ln_f.bias", {C}, 0.0f)}});
  if (!lora.enabled()) return model;

  // The base above is the model without LoRA, value for value; it only stops training. The
  // adapters' generators are seeded from a stream of their own, so adding or removing a target
  // changes no base value and no other adapter's.
  for (ModuleSpec& m : model.modules)
    for (ParamSpec& p : m.params) p.trainable = false;
  const std::uint64_t loraSeed = mix(seed, 0x4C6F5241ull);  // "LoRA"
  for (int i = 0; i < s.layers; ++i) {
    ModuleSpec& m = model.modules[static_cast<std::size_t>(i) + 1];
    for (LoraTarget t : lora.targets) {
      const std::int64_t in = inFeatures(t, C), out = outFeatures(t, C);
      const std::uint64_t k = static_cast<std::uint64_t>(i) * kNumLoraTargets + static_cast<std::uint64_t>(t);
      m.params.push_back(ParamSpec{loraAName(i, t), {lora.rank, in},
                                   uniformInit(mix(loraSeed, k), 1.0 / std::sqrt(static_cast<double>(in)))});
      m.params.push_back(ParamSpec{loraBName(i, t), {out, lora.rank}, init::constant(0.0f)});
    }
  }
  return model;
}

}  // namespace zrt::trainer
