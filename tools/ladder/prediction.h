// zrt-plan's prediction for one rung, through the planner's own library: the model is
// zrt-train's GPT-2 registration (every tensor by name and shape, so the parameter count is
// exact, biases, norms and position embeddings included), the config is the file the rung runs
// with (read by zrt-plan's config reader), and the strategy is the rung's. The planner's bill
// (model states, buffers, activations by Korthikanti et al.) is taken as it is: the ladder adds
// nothing to it and removes nothing, so a disagreement with the ledger is the planner's.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <filesystem>

#include "tools/ladder/memory_bytes.h"
#include "tools/ladder/rungs.h"
#include "tools/plan/model_spec.h"

namespace zrt::ladder {

struct Prediction {
  MemoryBytes bytes;  // zrt-plan's purposes summed by the ledger tag the runtime charges them to
  std::uint64_t trainable = 0, frozen = 0;  // parameters
  // The planner counts every buffer as live at once: its device peak is the device total.
  std::uint64_t devicePeak() const { return bytes.total(MemPlace::Device); }
};

// zrt-train's GPT-2 (tools/trainer/model) as zrt-plan's model: its registration's tensors and
// the transformer shape (vocabulary 256) for the activation estimate.
plan::ModelSpec gpt2PlanModel(const ModelShape& shape);

// The LoRA variant zrt-train trains with --lora-targets: every base tensor frozen; for each
// block and target, lora_A [r, in] and lora_B [out, r] trainable, where [in, out] is the adapted
// weight's shape (GPT-2 keeps weights as [in, out]). Throws InvalidArgument naming
// --lora-targets for a name it does not know.
plan::ModelSpec gpt2LoraPlanModel(const plan::ModelSpec& base, const LoraSettings& lora);

// The planner's evaluation of `rung` as `config` (the file written for it) configures it, for
// rank 0 of spec.ranks ranks on one node.
Prediction predict(const LadderSpec& spec, const Rung& rung, const std::filesystem::path& config);

}  // namespace zrt::ladder
