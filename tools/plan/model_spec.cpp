#include "tools/plan/model_spec.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tools/plan/checked_math.h"

namespace zrt::plan {

std::uint64_t TensorSpec::numel() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n = checkedProduct({n, d}, "tensor '" + name + "''s element count");
  return n;
}

std::uint64_t ModelSpec::trainableParams() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors)
    if (t.trainable) n = checkedSum({n, t.numel()}, "the trainable parameter count");
  return n;
}

std::uint64_t ModelSpec::frozenParams() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors)
    if (!t.trainable) n = checkedSum({n, t.numel()}, "the frozen parameter count");
  return n;
}

std::uint64_t ModelSpec::totalParams() const {
  return checkedSum({trainableParams(), frozenParams()}, "the parameter count");
}

std::uint64_t ModelSpec::largestTensor() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n = std::max(n, t.numel());
  return n;
}

std::vector<ParamTensor> ModelSpec::paramTensors() const {
  std::vector<ParamTensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back({t.name, t.numel(), t.trainable});
  return out;
}

std::vector<std::uint64_t> ModelSpec::trainableTensors() const {
  std::vector<std::uint64_t> out;
  for (const auto& t : tensors)
    if (t.trainable) out.push_back(t.numel());
  return out;
}

std::string moduleOf(std::string_view name) {
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t dot = std::min(name.find('.', start), name.size());
    const std::string_view part = name.substr(start, dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::string(name.substr(0, dot));
    start = dot + 1;
  }
  return std::string(name.substr(0, std::min(name.find('.'), name.size())));
}

std::vector<ModuleSize> ModelSpec::modules() const {
  std::vector<ModuleSize> out;
  if (!modulesKnown) return out;
  for (const auto& t : tensors) {
    const std::string name = t.module.empty() ? moduleOf(t.name) : t.module;
    if (out.empty() || out.back().name != name) out.push_back({name});
    (t.trainable ? out.back().trainable : out.back().frozen) += t.numel();
  }
  return out;
}

std::uint64_t parseParamCount(std::string_view text, std::string_view flag) {
  const std::string s(text);
  auto bad = [&]() {
    ZRT_THROW(InvalidArgument, flag, ": bad parameter count '", text,
              "': expected a positive count such as 7e9, 7B, 1.3B, 350M or 125K");
  };
  if (s.empty()) bad();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !std::isfinite(value) || value <= 0) bad();
  std::string suffix(end);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (suffix.empty()) mult = 1;
  else if (suffix == "K") mult = 1e3;
  else if (suffix == "M") mult = 1e6;
  else if (suffix == "B" || suffix == "G") mult = 1e9;
  else if (suffix == "T") mult = 1e12;
  else bad();
  const double count = std::round(value * mult);
  if (count < 1 || count > 1e18) bad();
  return static_cast<std::uint64_t>(count);
}

std::uint64_t transformerParamCount(const TransformerShape& s) {
  constexpr std::string_view what = "the parameter count 12·L·h² + V·h";
  return checkedSum({checkedProduct({12, s.layers, s.hidden, s.hidden}, what),
                     checkedProduct({s.vocab, s.hidden}, what)},
                    what);
}

ModelSpec fromTransformerShape(const TransformerShape& s) {
  ZRT_ENFORCE(s.layers > 0 && s.hidden > 0, "transformer shape needs layers and hidden");
  transformerParamCount(s);  // throws for a shape whose parameter count overflows
  ModelSpec m;
  m.shape = s;
  m.source = detail::cat("transformer L=", s.layers, " h=", s.hidden, " a=", s.heads,
                         " V=", s.vocab);
  const std::uint64_t h = s.hidden;
  if (s.vocab > 0) m.tensors.push_back({"embed.weight", {s.vocab, h}, true});
  for (std::uint64_t i = 0; i < s.layers; ++i) {
    const std::string p = detail::cat("layers.", i, ".");
    for (const char* proj : {"q", "k", "v", "o"})
      m.tensors.push_back({p + "attn." + proj + ".weight", {h, h}, true});
    m.tensors.push_back({p + "mlp.fc1.weight", {4 * h, h}, true});
    m.tensors.push_back({p + "mlp.fc2.weight", {h, 4 * h}, true});
  }
  return m;
}

ModelSpec fromParamCount(std::uint64_t params, std::string source) {
  ModelSpec m;
  m.source = std::move(source);
  m.tensors.push_back({"params", {params}, true});
  m.modulesKnown = false;
  return m;
}

namespace {

std::uint64_t nonNegativeInt(const nlohmann::json& j, const std::string& where) {
  if (!j.is_number_integer() || j.get<std::int64_t>() < 0) {
    ZRT_THROW(InvalidArgument, where, ": expected a non-negative integer, got ", j.dump());
  }
  return j.get<std::uint64_t>();
}

}  // namespace

ModelSpec parseManifest(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    ZRT_THROW(InvalidArgument, source, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) ZRT_THROW(InvalidArgument, source, ": a manifest is a JSON object");
  if (j.contains("format") && j["format"] != "zrt-manifest") {
    ZRT_THROW(InvalidArgument, source, ": \"format\" is ", j["format"].dump(),
              ", expected \"zrt-manifest\"");
  }
  if (j.contains("version") && j["version"] != 1) {
    ZRT_THROW(InvalidArgument, source, ": manifest version ", j["version"].dump(),
              " is not supported (this zrt-plan reads version 1)");
  }
  if (!j.contains("tensors") || !j["tensors"].is_array() || j["tensors"].empty()) {
    ZRT_THROW(InvalidArgument, source, ": \"tensors\" must be a non-empty array");
  }
  ModelSpec m;
  m.source = "manifest " + source;
  const auto& tensors = j["tensors"];
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const std::string where = detail::cat(source, ": tensors[", i, "]");
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
      ZRT_THROW(InvalidArgument, where, ": needs a string \"name\"");
    }
    if (!t.contains("shape") || !t["shape"].is_array()) {
      ZRT_THROW(InvalidArgument, where, " (", t["name"].get<std::string>(),
                "): needs a \"shape\" array");
    }
    TensorSpec spec;
    spec.name = t["name"].get<std::string>();
    for (std::size_t d = 0; d < t["shape"].size(); ++d) {
      spec.shape.push_back(nonNegativeInt(t["shape"][d], detail::cat(where, ".shape[", d, "]")));
    }
    if (t.contains("trainable")) {
      if (!t["trainable"].is_boolean())
        ZRT_THROW(InvalidArgument, where, ".trainable: expected true or false");
      spec.trainable = t["trainable"].get<bool>();
    }
    if (t.contains("module")) {
      if (!t["module"].is_string() || t["module"].get<std::string>().empty())
        ZRT_THROW(InvalidArgument, where, ".module: expected a non-empty string");
      spec.module = t["module"].get<std::string>();
    }
    try {
      spec.numel();
    } catch (const InvalidArgument&) {
      ZRT_THROW(InvalidArgument, where, " (", spec.name, "): the shape's element count overflows 64 bits");
    }
    if (t.contains("dtype") && (!t["dtype"].is_string() ||
                                (t["dtype"] != "fp32" && t["dtype"] != "fp16" && t["dtype"] != "bf16"))) {
      ZRT_THROW(InvalidArgument, where, ".dtype: expected \"fp32\", \"fp16\" or \"bf16\", got ",
                t["dtype"].dump());
    }
    m.tensors.push_back(std::move(spec));
  }
  if (j.contains("model")) {
    const auto& mj = j["model"];
    if (!mj.is_object()) ZRT_THROW(InvalidArgument, source, ": \"model\" must be an object");
    TransformerShape s;
    auto field = [&](const char* key, std::uint64_t& out) {
      if (mj.contains(key)) out = nonNegativeInt(mj[key], detail::cat(source, ": model.", key));
    };
    field("layers", s.layers);
    field("hidden", s.hidden);
    field("heads", s.heads);
    field("vocab", s.vocab);
    if (s.layers > 0 && s.hidden > 0 && s.heads > 0) m.shape = s;
  }
  try {
    m.totalParams();
  } catch (const InvalidArgument& e) {
    ZRT_THROW(InvalidArgument, source, ": ", e.what());
  }
  return m;
}

ModelSpec readManifest(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) ZRT_THROW(InvalidArgument, "--manifest: cannot open '", file.string(), "'");
  std::stringstream text;
  text << in.rdbuf();
  return parseManifest(text.str(), file.string());
}

namespace {

bool matchesTarget(const std::string& name, const std::vector<std::string>& targets) {
  std::stringstream parts(name);
  for (std::string part; std::getline(parts, part, '.');) {
    for (const auto& t : targets)
      if (part == t || part == t + "_proj") return true;
  }
  return false;
}

}  // namespace

ModelSpec addLora(const ModelSpec& base, std::uint64_t rank, const std::vector<std::string>& targets) {
  if (rank == 0) ZRT_THROW(InvalidArgument, "--lora-rank: must be at least 1");
  if (targets.empty()) ZRT_THROW(InvalidArgument, "--lora-targets: no target given");
  ModelSpec m = base;
  m.loraRank = rank;
  m.loraTargets = targets;
  m.tensors.clear();
  for (const TensorSpec& t : base.tensors) {
    TensorSpec frozen = t;
    frozen.trainable = false;
    m.tensors.push_back(frozen);
    if (t.shape.size() == 2 && matchesTarget(t.name, targets)) {
      const std::uint64_t dOut = t.shape[0], dIn = t.shape[1];
      std::string stem = t.name.ends_with(".weight") ? t.name.substr(0, t.name.size() - 7) : t.name;
      // In the module of the layer they adapt, registered with it.
      const std::string module = t.module.empty() ? moduleOf(t.name) : t.module;
      m.tensors.push_back({stem + ".lora_A", {rank, dIn}, true, module});
      m.tensors.push_back({stem + ".lora_B", {dOut, rank}, true, module});
      ++m.loraAdaptedTensors;
    }
  }
  if (m.loraAdaptedTensors == 0) {
    std::string list;
    for (const auto& t : targets) list += (list.empty() ? "" : ",") + t;
    ZRT_THROW(InvalidArgument, "--lora-targets: no 2-D tensor of the model matches '", list,
              "' (a name part must equal a target or target_proj)");
  }
  m.source = base.source + detail::cat(" + LoRA r=", rank);
  return m;
}

}  // namespace zrt::plan
