// What zrt-train records about its model in a checkpoint's manifest metadata (Engine::save's
// `metadata`, docs/checkpoint.md), and the checks that a checkpoint's LoRA settings fit the run:
//   "model":     the GPT-2 as Hugging Face's GPT2Config names it (model_type, n_layer, n_embd,
//                n_head, n_positions, vocab_size, ...), always;
//   "lora":      with adapters: r, lora_alpha, target_modules (PEFT's names), fan_in_fan_out,
//                the name prefixes zrt-ckpt export uses for PEFT's adapter file and for the
//                merged model, and base_model_name_or_path (--init-from, or null);
//   "zrt-train": the seed, --init-from and --lora-targets as given.
// Thread-safety: pure functions and file reads.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/gpt2.h"
#include "model/lora.h"

namespace zrt::trainer {

nlohmann::json checkpointMetadata(const Gpt2Shape& shape, std::uint64_t seed, const LoraConfig& lora,
                                  const std::string& initFrom);

// The checkpoint directory `path` names: itself when it holds a manifest, else the one its latest
// pointer names; "" when `path` is not a directory (a safetensors file).
std::string checkpointDirectoryAt(const std::string& path);

// The metadata of the checkpoint `path` names (a checkpoint directory, or one with a latest
// pointer); an empty object for a safetensors file, or a checkpoint saved without any.
nlohmann::json checkpointMetadataAt(const std::string& path);

// Throws InvalidArgument, starting with `what` (e.g. "--resume DIR") and naming the checkpoint
// directory `checkpoint`, when the model `metadata` records differs from `model` (this run's
// checkpointMetadata()["model"]) in any field: one the shapes cannot show (n_head: the same
// weights split into other heads) or one they can. The message names the field, the flag that
// sets it, and both values. A checkpoint that records no model (saved by another program) is
// left to the engine's comparison of names and shapes.
void checkModelMatches(const nlohmann::json& metadata, const nlohmann::json& model, const std::string& what,
                       const std::string& checkpoint);

// Throws InvalidArgument, starting with `what` (e.g. "--resume DIR"), when a checkpoint whose
// metadata records LoRA adapters was trained with another rank, alpha or targets than `lora`
// while this run trains adapters too: the engine sees a rank or a target that differs (names and
// shapes) but not alpha, which changes what the same adapter values mean.
void checkLoraMatches(const nlohmann::json& metadata, const LoraConfig& lora, const std::string& what);

}  // namespace zrt::trainer
