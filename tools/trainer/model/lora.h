// LoRA (low-rank adapters, Hu et al. 2021, as Hugging Face PEFT implements them) on GPT-2's
// linear layers: which layers can carry an adapter, their names in zrt-train's flags, in the
// model and in PEFT, and how an adapter starts. The arithmetic is in gpt2_kernels.h
// (loraForward, loraBackward), the registration in gpt2_spec.cpp.
//
// A linear layer with an adapter computes
//   y = x W + b + (alpha / r) (x A^T) B^T
// with W [in, out] as Hugging Face's Conv1D stores it, and, as PEFT stores them,
//   lora_A [r, in]  (PEFT's lora_A, an nn.Linear(in, r): weight [r, in]), and
//   lora_B [out, r] (an nn.Linear(r, out): weight [out, r]).
// Because W is [in, out] (PEFT's fan_in_fan_out = true), the adapter folds into the base as
// W + (alpha / r) (B A)^T. A starts as PEFT's default (init_lora_weights = true:
// kaiming_uniform_ with a = sqrt(5), which is U(-1/sqrt(in), 1/sqrt(in))), B at zero, so a model
// with fresh adapters computes exactly what the base does.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <zrt/runtime/model_spec.h>

namespace zrt::trainer {

// The linear layers of a GPT-2 block, in the order a block registers their adapters.
enum class LoraTarget : int {
  Qkv = 0,      // attn.c_attn   [C, 3C]
  Proj = 1,     // attn.c_proj   [C, C]
  Fc = 2,       // mlp.c_fc      [C, 4C]
  MlpProj = 3,  // mlp.c_proj    [4C, C]
};
inline constexpr int kNumLoraTargets = 4;

// zrt-train's name (--lora-targets): "qkv", "proj", "fc", "mlp_proj".
std::string_view flagName(LoraTarget t);
// The layer's path inside a block, as Hugging Face names it: "attn.c_attn", "attn.c_proj"...
std::string_view layerPath(LoraTarget t);
// PEFT's target_modules entry for it: "c_attn", "attn.c_proj", "c_fc", "mlp.c_proj" (the two
// c_proj layers are qualified, since PEFT matches a target by the end of a module's name).
std::string_view peftTargetName(LoraTarget t);
// The layer's input and output widths for a model `hidden` wide.
std::int64_t inFeatures(LoraTarget t, std::int64_t hidden);
std::int64_t outFeatures(LoraTarget t, std::int64_t hidden);

struct LoraConfig {
  int rank = 0;  // r; 0: no adapters
  double alpha = 0;
  std::vector<LoraTarget> targets;  // in LoraTarget order, each once

  bool enabled() const { return rank > 0; }
  double scaling() const { return alpha / rank; }
  bool adapts(LoraTarget t) const;
};

// "qkv,proj,fc,mlp_proj" (any subset, any order, also "all") into targets in LoraTarget order.
// Throws InvalidArgument naming --lora-targets for an empty list, an unknown name (listing the
// known ones) or a name given twice.
std::vector<LoraTarget> parseLoraTargets(const std::string& list);
// The flag's spelling of `targets`, comma-separated.
std::string joinFlagNames(const std::vector<LoraTarget>& targets);

// Throws InvalidArgument naming the flag for a rank < 1 or above the model's width (a rank at
// least min(in, out) of every target is no longer low-rank), an alpha that is not positive and
// finite, or no targets.
void validate(const LoraConfig& lora, std::int64_t hidden);

// Adapter names for block `block`: "h.{block}.attn.c_attn.lora_A.weight" and ".lora_B.weight".
std::string loraAName(int block, LoraTarget t);
std::string loraBName(int block, LoraTarget t);

// U(-bound, bound) from a generator seeded by `seed` alone (the same values on every rank and
// run, whatever library built it): lora_A's initialiser with bound = 1/sqrt(in).
Initializer uniformInit(std::uint64_t seed, double bound);

}  // namespace zrt::trainer
