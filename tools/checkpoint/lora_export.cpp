#include "lora_export.h"

#include <cmath>
#include <map>

#include "core/error.h"

namespace zrt::ckpt_tool {

using nlohmann::json;

namespace {

std::string shapeText(const std::vector<std::int64_t>& s) { return json(s).dump(); }

}  // namespace

std::optional<LoraInfo> loraInfoOf(const checkpoint::Manifest& m, const std::string& dir) {
  if (!m.metadata.contains("lora")) return std::nullopt;
  const json& j = m.metadata.at("lora");
  LoraInfo l;
  l.raw = j;
  try {
    l.r = j.at("r").get<int>();
    l.alpha = j.at("lora_alpha").get<double>();
    l.targetModules = j.at("target_modules").get<std::vector<std::string>>();
    l.fanInFanOut = j.value("fan_in_fan_out", false);
    l.adapterNamePrefix = j.value("adapter_name_prefix", std::string());
    if (j.contains("base_name_prefix")) l.baseNamePrefix = j.at("base_name_prefix").get<std::string>();
  } catch (const json::exception& e) {
    ZRT_THROW(InvalidArgument, "zrt-ckpt: ", dir, "/", checkpoint::kManifestName, ": metadata.lora: ", e.what());
  }
  if (l.r < 1 || !(l.alpha > 0))
    ZRT_THROW(InvalidArgument, "zrt-ckpt: ", dir, "/", checkpoint::kManifestName, ": metadata.lora has r ", l.r,
              " and lora_alpha ", l.alpha, " (r must be at least 1, lora_alpha positive)");
  return l;
}

json adapterConfig(const LoraInfo& l) {
  // lora_alpha is an int in PEFT's LoraConfig; a whole alpha is written as one (8, not 8.0).
  const bool whole = std::trunc(l.alpha) == l.alpha && l.alpha < 1e15;
  const json alpha = whole ? json(static_cast<std::int64_t>(l.alpha)) : json(l.alpha);
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", l.raw.value("base_model_name_or_path", json(nullptr))},
          {"revision", nullptr},
          {"r", l.r},
          {"lora_alpha", alpha},
          {"lora_dropout", l.raw.value("lora_dropout", 0.0)},
          {"target_modules", l.targetModules},
          {"fan_in_fan_out", l.fanInFanOut},
          {"bias", l.raw.value("bias", std::string("none"))},
          {"init_lora_weights", true},
          {"modules_to_save", nullptr},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"inference_mode", true}};
}

bool isAdapterName(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

std::vector<FoldPlan> planFolds(const checkpoint::Manifest& m, const LoraInfo& l) {
  // Adapters by the base weight they adapt: "<module>/<X>.weight".
  std::map<std::string, FoldPlan> byBase;
  for (const checkpoint::ManifestParam& p : m.params) {
    for (const char* part : {".lora_A.", ".lora_B."}) {
      const std::size_t at = p.name.find(part);
      if (at == std::string::npos) continue;
      const std::string suffix = p.name.substr(at + 8);  // after ".lora_A."
      const std::string base = p.module + "/" + p.name.substr(0, at) + "." + suffix;
      FoldPlan& f = byBase[base];
      (part[6] == 'A' ? f.a : f.b) = &p;
    }
  }
  std::vector<FoldPlan> out;
  for (auto& [baseName, f] : byBase) {
    f.base = m.param(baseName);
    const checkpoint::ManifestParam* any = f.a ? f.a : f.b;
    if (!f.a || !f.b)
      ZRT_THROW(InvalidArgument, "zrt-ckpt: adapter '", any->fullName(), "' has no ", f.a ? "lora_B" : "lora_A",
                " partner");
    if (!f.base)
      ZRT_THROW(InvalidArgument, "zrt-ckpt: adapter '", any->fullName(), "' adapts '", baseName,
                "', which the checkpoint does not have");
    const auto& w = f.base->shape;
    const auto& a = f.a->shape;
    const auto& b = f.b->shape;
    bool ok = w.size() == 2 && a.size() == 2 && b.size() == 2 && a[0] == l.r && b[1] == l.r;
    if (ok) {
      const std::int64_t in = l.fanInFanOut ? w[0] : w[1], outF = l.fanInFanOut ? w[1] : w[0];
      ok = a[1] == in && b[0] == outF;
    }
    if (!ok)
      ZRT_THROW(InvalidArgument, "zrt-ckpt: '", f.base->fullName(), "' ", shapeText(w), " with '", f.a->fullName(), "' ",
                shapeText(a), " and '", f.b->fullName(), "' ", shapeText(b), " do not fit r ", l.r,
                " (lora_A is [r, in], lora_B [out, r], the base [", l.fanInFanOut ? "in, out" : "out, in",
                "] since fan_in_fan_out is ", l.fanInFanOut ? "true" : "false", ")");
    out.push_back(f);
  }
  return out;
}

void foldAdapter(float* w, const float* a, const float* b, std::int64_t in, std::int64_t out, int r, double scaling,
                 bool fanInFanOut) {
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t i = 0; i < in; ++i) {
      double d = 0;
      for (int k = 0; k < r; ++k) d += static_cast<double>(b[o * r + k]) * static_cast<double>(a[k * in + i]);
      float& x = fanInFanOut ? w[i * out + o] : w[o * in + i];
      x = static_cast<float>(static_cast<double>(x) + scaling * d);
    }
}

}  // namespace zrt::ckpt_tool
