// What zrt-plan knows about a model: its parameter tensors (name, shape, trainable or frozen,
// and the module, the Engine's unit of registration, each belongs to) and, when given, its
// transformer shape for the activation estimate. Built from a parameter
// count ("7B"), a transformer shape (12·L·h² + V·h parameters) or a ZRT checkpoint manifest
// (docs/plan.md defines the format), and turned into its LoRA variant by addLora().
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "partition/model_states.h"

namespace zrt::plan {

struct TensorSpec {
  std::string name;
  std::vector<std::uint64_t> shape;
  bool trainable = true;
  // The module (a unit of compute the Engine registers: a transformer block) it belongs to;
  // empty: moduleOf(name).
  std::string module = {};
  std::uint64_t numel() const;
};

// A tensor's module from its name: the dot-separated parts up to the first all-digit one
// ("layers.3.attn.q.weight" -> "layers.3", "model.layers.12.mlp.fc1.weight" ->
// "model.layers.12"), or the first part when none is ("embed.weight" -> "embed").
std::string moduleOf(std::string_view tensorName);

// A module's elements, trainable and frozen.
struct ModuleSize {
  std::string name;
  std::uint64_t trainable = 0;
  std::uint64_t frozen = 0;
  std::uint64_t elements() const { return trainable + frozen; }
};

// A decoder-only transformer as Korthikanti et al. describe it: L layers of hidden size h with a
// heads, a vocabulary of V tokens, an MLP of 4h, input and output embeddings tied.
struct TransformerShape {
  std::uint64_t layers = 0;
  std::uint64_t hidden = 0;
  std::uint64_t heads = 0;
  std::uint64_t vocab = 0;
};

struct ModelSpec {
  std::vector<TensorSpec> tensors;
  std::optional<TransformerShape> shape;  // absent: activations cannot be estimated
  std::string source;                     // how the model was described, for the report
  // LoRA, when addLora() made this spec.
  std::uint64_t loraRank = 0;
  std::vector<std::string> loraTargets;
  std::uint64_t loraAdaptedTensors = 0;  // per model; adapters per layer = this / layers
  // Whether the tensors are the model's own (a shape, a manifest, a registration), so that
  // modules() means something; false for a bare parameter count.
  bool modulesKnown = true;

  std::uint64_t trainableParams() const;
  std::uint64_t frozenParams() const;
  // These throw InvalidArgument when a count overflows 64 bits.
  std::uint64_t totalParams() const;
  std::uint64_t largestTensor() const;
  // The model-state allocator's view: names, element counts, trainable or not.
  std::vector<ParamTensor> paramTensors() const;
  // The trainable tensors' element counts in order: the Engine's reduce buckets' tensors.
  std::vector<std::uint64_t> trainableTensors() const;
  // The modules in registration order: each run of consecutive tensors of one module (a module
  // named again after another one is a new module, as a registration would make it). Empty when
  // !modulesKnown.
  std::vector<ModuleSize> modules() const;
};

// "7e9", "7B", "1.3b", "350M", "125k", "7000000000": K = 1e3, M = 1e6, B or G = 1e9, T = 1e12.
// Throws InvalidArgument naming `flag` on anything else, or on zero.
std::uint64_t parseParamCount(std::string_view text, std::string_view flag = "--params");

// 12·L·h² + V·h: per layer 4h² of attention projections (q, k, v, o) and 8h² of MLP (h→4h→h),
// plus one tied embedding of V·h. Biases, norms and position embeddings are left out.
std::uint64_t transformerParamCount(const TransformerShape& shape);

// One tensor per parameter group, named as a manifest would name them:
// embed.weight [V,h]; layers.<i>.attn.{q,k,v,o}.weight [h,h]; layers.<i>.mlp.fc1.weight [4h,h];
// layers.<i>.mlp.fc2.weight [h,4h].
ModelSpec fromTransformerShape(const TransformerShape& shape);

// A model known only by its parameter count: a single flat tensor, modules not known.
ModelSpec fromParamCount(std::uint64_t params, std::string source);

// Reads a checkpoint manifest (docs/plan.md): {"format": "zrt-manifest", "version": 1,
// "tensors": [{"name", "shape", optional "dtype", "trainable", "module"}], optional "model":
// {"layers", "hidden", "heads", "vocab"}}. Throws InvalidArgument naming the file and the entry.
ModelSpec readManifest(const std::filesystem::path& file);
ModelSpec parseManifest(const std::string& text, const std::string& source);

// The LoRA variant: every existing tensor frozen; for each 2-D tensor [d_out, d_in] whose name
// has a dot-separated part equal to a target (or to target + "_proj"), two trainable adapters
// lora_A [r, d_in] and lora_B [d_out, r]: r·(d_in + d_out) parameters, 2·r·(d_in + d_out) bytes
// in 16-bit. Throws InvalidArgument when r is 0 or no tensor matches.
ModelSpec addLora(const ModelSpec& base, std::uint64_t rank, const std::vector<std::string>& targets);

}  // namespace zrt::plan
