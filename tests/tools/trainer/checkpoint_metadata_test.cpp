// What zrt-train records in a checkpoint's manifest metadata (tools/trainer/checkpoint_metadata.h)
// and the refusal of a checkpoint whose adapters were trained with other LoRA settings.
#include <doctest/doctest.h>

#include <string>

#include "checkpoint_metadata.h"
#include "core/error.h"

using namespace zrt::trainer;
using nlohmann::json;

namespace {

const Gpt2Shape kShape{.layers = 3, .hidden = 48, .heads = 4, .seqLen = 64, .vocab = 256};
const LoraConfig kLora{8, 16.0, {LoraTarget::Qkv, LoraTarget::MlpProj}};

std::string refusal(const json& metadata, const LoraConfig& lora) {
  try {
    checkLoraMatches(metadata, lora, "--resume /ckpt");
  } catch (const zrt::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("metadata: the model as GPT2Config names it, and with LoRA PEFT's settings") {
  const json plain = checkpointMetadata(kShape, 7, {}, "");
  CHECK(plain.at("model") == json{{"model_type", "gpt2"}, {"n_layer", 3}, {"n_embd", 48}, {"n_head", 4},
                                  {"n_positions", 64}, {"vocab_size", 256}, {"activation_function", "gelu_new"},
                                  {"layer_norm_epsilon", 1e-5}, {"tie_word_embeddings", true},
                                  {"tokenizer", "bytes (token = byte value)"}});
  CHECK_FALSE(plain.contains("lora"));
  CHECK(plain.at("zrt-train") == json{{"seed", 7}, {"init_from", nullptr}});

  const json m = checkpointMetadata(kShape, 7, kLora, "/ckpt/base/step300");
  const json& l = m.at("lora");
  CHECK(l.at("r") == 8);
  CHECK(l.at("lora_alpha") == 16.0);
  CHECK(l.at("target_modules") == json{"c_attn", "mlp.c_proj"});
  CHECK(l.at("fan_in_fan_out") == true);
  CHECK(l.at("adapter_name_prefix") == "base_model.model.transformer.");
  CHECK(l.at("base_name_prefix") == "");
  CHECK(l.at("base_model_name_or_path") == "/ckpt/base/step300");
  CHECK(m.at("zrt-train").at("lora_targets") == "qkv,mlp_proj");
}

TEST_CASE("a checkpoint's LoRA settings must be the run's, when both have adapters") {
  const json saved = checkpointMetadata(kShape, 7, kLora, "");
  CHECK(refusal(saved, kLora).empty());
  CHECK(refusal(saved, {}).empty());  // no adapters here: the engine says what does not match
  CHECK(refusal(json::object(), kLora).empty());  // no adapters there, or an older checkpoint
  LoraConfig alpha = kLora;
  alpha.alpha = 32;
  CHECK(refusal(saved, alpha).find("--resume /ckpt: its adapters were trained with r 8, alpha 16 on "
                                   "[\"c_attn\",\"mlp.c_proj\"]; this run has --lora-rank 8 --lora-alpha 32") != std::string::npos);
  LoraConfig targets = kLora;
  targets.targets = {LoraTarget::Qkv};
  CHECK_FALSE(refusal(saved, targets).empty());
  json broken = saved;
  broken["lora"].erase("r");
  CHECK(refusal(broken, kLora).find("metadata.lora is malformed") != std::string::npos);
}

namespace {

std::string modelRefusal(const json& metadata, const Gpt2Shape& shape) {
  try {
    checkModelMatches(metadata, checkpointMetadata(shape, 7, {}, "").at("model"), "--resume /ckpt", "/ckpt/step3");
  } catch (const zrt::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a checkpoint of another model is refused, naming the field, the flag and both values") {
  // Through the manifest's text, as a resumed run reads it: unsigned and double values come back.
  const json saved = json::parse(checkpointMetadata(kShape, 7, kLora, "/base").dump());
  CHECK(modelRefusal(saved, kShape).empty());
  CHECK(modelRefusal(json::object(), kShape).empty());  // saved by another program: the engine compares

  // Every weight keeps its shape with other heads: only the record tells.
  Gpt2Shape heads = kShape;
  heads.heads = 2;
  const std::string m = modelRefusal(saved, heads);
  CHECK(m.find("--resume /ckpt: the checkpoint /ckpt/step3 is of another model: n_head 4 recorded, 2 in this "
               "run (--heads)") != std::string::npos);
  CHECK(m.find("n_embd") == std::string::npos);  // only what differs

  Gpt2Shape several = kShape;
  several.layers = 2;
  several.seqLen = 32;
  const std::string both = modelRefusal(saved, several);
  CHECK(both.find("n_layer 3 recorded, 2 in this run (--layers)") != std::string::npos);
  CHECK(both.find("n_positions 64 recorded, 32 in this run (--seq-len)") != std::string::npos);

  // A field no flag sets, one this program does not know, and one the record lacks.
  json other = saved;
  other["model"]["activation_function"] = "relu";
  other["model"]["n_inner"] = 1024;
  other["model"].erase("tie_word_embeddings");
  const std::string fixed = modelRefusal(other, kShape);
  CHECK(fixed.find("activation_function \"relu\" recorded, \"gelu_new\" in this run (fixed in this zrt-train)") !=
        std::string::npos);
  CHECK(fixed.find("n_inner 1024 recorded, which this zrt-train's model does not have") != std::string::npos);
  CHECK(fixed.find("tie_word_embeddings not recorded (this run has true)") != std::string::npos);

  json malformed = saved;
  malformed["model"] = "gpt2";
  CHECK(modelRefusal(malformed, kShape).find("records a malformed model") != std::string::npos);
}
