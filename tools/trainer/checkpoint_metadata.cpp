#include "checkpoint_metadata.h"

#include <vector>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/manifest.h"

namespace zrt::trainer {

using nlohmann::json;

namespace {

std::vector<std::string> peftTargets(const LoraConfig& lora) {
  std::vector<std::string> out;
  for (LoraTarget t : lora.targets) out.emplace_back(peftTargetName(t));
  return out;
}

}  // namespace

json checkpointMetadata(const Gpt2Shape& s, std::uint64_t seed, const LoraConfig& lora, const std::string& initFrom) {
  const json base = initFrom.empty() ? json(nullptr) : json(initFrom);
  json m = {{"model",
             {{"model_type", "gpt2"},
              {"n_layer", s.layers},
              {"n_embd", s.hidden},
              {"n_head", s.heads},
              {"n_positions", s.seqLen},
              {"vocab_size", s.vocab},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"tie_word_embeddings", true},
              {"tokenizer", "bytes (token = byte value)"}}},
            {"zrt-train", {{"seed", seed}, {"init_from", base}}}};
  if (!lora.enabled()) return m;
  m["zrt-train"]["lora_targets"] = joinFlagNames(lora.targets);
  // The trainer registers each parameter under its Hugging Face name inside a module, so PEFT's
  // name for an adapter of GPT2LMHeadModel is "base_model.model.transformer." + that name, and a
  // merged model's tensors are those names bare (as the hub's gpt2 model.safetensors).
  m["lora"] = {{"r", lora.rank},
               {"lora_alpha", lora.alpha},
               {"target_modules", peftTargets(lora)},
               {"fan_in_fan_out", true},
               {"lora_dropout", 0.0},
               {"bias", "none"},
               {"adapter_name_prefix", "base_model.model.transformer."},
               {"base_name_prefix", ""},
               {"base_model_name_or_path", base}};
  return m;
}

std::string checkpointDirectoryAt(const std::string& path) {
  using namespace zrt::checkpoint;
  if (!isDirectory(path)) return "";
  return pathExists(joinPath(path, kManifestName)) ? path : joinPath(path, resolveTag(path, ""));
}

json checkpointMetadataAt(const std::string& path) {
  const std::string dir = checkpointDirectoryAt(path);
  if (dir.empty()) return json::object();
  return checkpoint::readManifest(dir).metadata;
}

void checkModelMatches(const json& metadata, const json& model, const std::string& what,
                       const std::string& checkpoint) {
  if (!metadata.is_object() || !metadata.contains("model")) return;
  const json& saved = metadata.at("model");
  if (!saved.is_object())
    ZRT_THROW(InvalidArgument, what, ": the checkpoint ", checkpoint, " records a malformed model: ", saved.dump());
  // The fields a flag sets; the rest are fixed by this program (the byte vocabulary, GELU...).
  const auto flagFor = [](const std::string& field) -> std::string {
    if (field == "n_layer") return "--layers";
    if (field == "n_embd") return "--hidden";
    if (field == "n_head") return "--heads";
    if (field == "n_positions") return "--seq-len";
    return "";
  };
  std::string differences;
  const auto note = [&](const std::string& text) { differences += (differences.empty() ? "" : "; ") + text; };
  for (const auto& [field, value] : saved.items()) {
    if (!model.contains(field)) {
      note(detail::cat(field, " ", value.dump(), " recorded, which this zrt-train's model does not have"));
      continue;
    }
    const json& mine = model.at(field);
    if (mine == value) continue;
    const std::string flag = flagFor(field);
    note(detail::cat(field, " ", value.dump(), " recorded, ", mine.dump(), " in this run",
                     flag.empty() ? " (fixed in this zrt-train)" : " (" + flag + ")"));
  }
  for (const auto& [field, value] : model.items())
    if (!saved.contains(field)) note(detail::cat(field, " not recorded (this run has ", value.dump(), ")"));
  if (!differences.empty())
    ZRT_THROW(InvalidArgument, what, ": the checkpoint ", checkpoint, " is of another model: ", differences,
              "; give the model flags of the run that saved it");
}

void checkLoraMatches(const json& metadata, const LoraConfig& lora, const std::string& what) {
  if (!lora.enabled() || !metadata.contains("lora")) return;
  const json& saved = metadata.at("lora");
  try {
    const int r = saved.at("r").get<int>();
    const double alpha = saved.at("lora_alpha").get<double>();
    const auto targets = saved.at("target_modules").get<std::vector<std::string>>();
    if (r != lora.rank || alpha != lora.alpha || targets != peftTargets(lora))
      ZRT_THROW(InvalidArgument, what, ": its adapters were trained with r ", r, ", alpha ", alpha, " on ",
                json(targets).dump(), "; this run has --lora-rank ", lora.rank, " --lora-alpha ", lora.alpha,
                " on ", json(peftTargets(lora)).dump(), " (give the same LoRA flags)");
  } catch (const json::exception& e) {
    ZRT_THROW(InvalidArgument, what, ": its manifest's metadata.lora is malformed: ", e.what());
  }
}

}  // namespace zrt::trainer
