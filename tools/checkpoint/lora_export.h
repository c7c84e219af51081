// What zrt-ckpt export does with a checkpoint that holds LoRA adapters: the manifest metadata's
// "lora" entry (docs/checkpoint.md, written by zrt-train --lora-rank) read and checked, PEFT's
// adapter_config.json built from it, and the adapters folded into their base weights for
// `export --merge`.
// An adapter of the base weight "<X>.weight" is the pair "<X>.lora_A.weight" [r, in] and
// "<X>.lora_B.weight" [out, r] in the same module, as PEFT names them; the folded weight is
//   W + (lora_alpha / r) (B A)^T   when the base is stored [in, out] (fan_in_fan_out, HF Conv1D)
//   W + (lora_alpha / r)  B A      when it is stored [out, in] (nn.Linear).
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/manifest.h"

namespace zrt::ckpt_tool {

struct LoraInfo {
  int r = 0;
  double alpha = 0;
  std::vector<std::string> targetModules;  // PEFT's names
  bool fanInFanOut = false;
  std::string adapterNamePrefix;  // before a parameter's name in PEFT's adapter file
  std::optional<std::string> baseNamePrefix;  // before it in a merged model; none: "<module>.<param>"
  nlohmann::json raw;                         // the whole entry, for adapter_config.json
  double scaling() const { return alpha / r; }
};

// The manifest's metadata.lora, or nothing when it has none. Throws InvalidArgument naming the
// checkpoint and the key when the entry is malformed (r < 1, alpha not positive, a wrong type).
std::optional<LoraInfo> loraInfoOf(const checkpoint::Manifest& m, const std::string& checkpointDir);

// PEFT's adapter_config.json for it, with LoraConfig's keys only (PEFT 0.10's loader refuses
// a key it does not know): peft_type, task_type, r, lora_alpha, target_modules, fan_in_fan_out,
// bias, lora_dropout, base_model_name_or_path, inference_mode, modules_to_save... Where it came
// from goes in the adapter file's safetensors metadata instead.
nlohmann::json adapterConfig(const LoraInfo& lora);

// Whether `name` is an adapter tensor (".lora_A." or ".lora_B." in it).
bool isAdapterName(const std::string& name);

// One base weight with an adapter: the manifest's parameters involved.
struct FoldPlan {
  const checkpoint::ManifestParam* base = nullptr;
  const checkpoint::ManifestParam* a = nullptr;
  const checkpoint::ManifestParam* b = nullptr;
};

// For every base weight of `m` that has an adapter, its plan; throws InvalidArgument naming the
// tensors when an adapter lacks its partner or its base, or the shapes do not fit r and the
// layout (fan_in_fan_out).
std::vector<FoldPlan> planFolds(const checkpoint::Manifest& m, const LoraInfo& lora);

// W (as stored: [in, out] with fan_in_fan_out, else [out, in]) += scaling (B A) in that layout,
// each element's sum of r products formed in double and rounded once.
void foldAdapter(float* w, const float* a, const float* b, std::int64_t in, std::int64_t out, int r,
                 double scaling, bool fanInFanOut);

}  // namespace zrt::ckpt_tool
