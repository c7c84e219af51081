// zrt-plan's prediction for one rung, through the planner's own library: the model is
// zrt-train's GPT-2 registration (every tensor by name, shape and module, so the parameter count
// is exact, biases, norms and position embeddings included, and the buffers sized per module are
// the Engine's), the config is the file the rung runs with (read by zrt-plan's config reader),
// the strategy is the rung's, and the hardware is this machine's host device (its huge pages, the
// NVMe directory's block size). The activations are the trainer's own allocation
// (gpt2ActivationBytes, given to the planner as its activation model): zrt-train keeps fp32
// activations and its backward scratch whatever the precision and checkpointing, which
// Korthikanti et al.'s estimate of a 16-bit framework does not describe. The planner's bill is
// otherwise taken as it is: the ladder adds nothing to it and removes nothing, so a disagreement
// with the ledger is the planner's.
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

// zrt-train's GPT-2 (tools/trainer/model) as zrt-plan's model: its registration's tensors with
// their modules, and the transformer shape (vocabulary 256).
plan::ModelSpec gpt2PlanModel(const ModelShape& shape);

// The LoRA variant zrt-train trains with --lora-rank and --lora-targets, from the trainer's own
// registration: every base tensor frozen; in each block's module, for each target, lora_A
// [r, in] and lora_B [out, r] trainable, where [in, out] is the adapted weight's shape (GPT-2
// keeps weights as [in, out]). Throws InvalidArgument naming --lora-targets (or --lora-rank)
// for a setting the trainer refuses.
plan::ModelSpec gpt2LoraPlanModel(const ModelShape& shape, const LoraSettings& lora);

// The planner's evaluation of `rung` as `config` (the file written for it) configures it, for
// rank 0 of spec.ranks ranks on one node.
Prediction predict(const LadderSpec& spec, const Rung& rung, const std::filesystem::path& config);

}  // namespace zrt::ladder
