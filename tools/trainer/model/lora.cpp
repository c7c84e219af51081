#include "tools/trainer/model/lora.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace zrt::trainer {

namespace {

constexpr LoraTarget kAll[kNumLoraTargets] = {LoraTarget::Qkv, LoraTarget::Proj, LoraTarget::Fc,
                                              LoraTarget::MlpProj};

std::string knownNames() {
  std::string s;
  for (LoraTarget t : kAll) s += std::string(s.empty() ? "" : ", ") + std::string(flagName(t));
  return s + ", all";
}

}  // namespace

std::string_view flagName(LoraTarget t) {
  switch (t) {
    case LoraTarget::Qkv: return "qkv";
    case LoraTarget::Proj: return "proj";
    case LoraTarget::Fc: return "fc";
    case LoraTarget::MlpProj: return "mlp_proj";
  }
  return "?";
}

std::string_view layerPath(LoraTarget t) {
  switch (t) {
    case LoraTarget::Qkv: return "attn.c_attn";
    case LoraTarget::Proj: return "attn.c_proj";
    case LoraTarget::Fc: return "mlp.c_fc";
    case LoraTarget::MlpProj: return "mlp.c_proj";
  }
  return "?";
}

std::string_view peftTargetName(LoraTarget t) {
  switch (t) {
    case LoraTarget::Qkv: return "c_attn";
    case LoraTarget::Proj: return "attn.c_proj";
    case LoraTarget::Fc: return "c_fc";
    case LoraTarget::MlpProj: return "mlp.c_proj";
  }
  return "?";
}

std::int64_t inFeatures(LoraTarget t, std::int64_t hidden) {
  return t == LoraTarget::MlpProj ? 4 * hidden : hidden;
}

std::int64_t outFeatures(LoraTarget t, std::int64_t hidden) {
  switch (t) {
    case LoraTarget::Qkv: return 3 * hidden;
    case LoraTarget::Fc: return 4 * hidden;
    default: return hidden;
  }
}

bool LoraConfig::adapts(LoraTarget t) const {
  return enabled() && std::find(targets.begin(), targets.end(), t) != targets.end();
}

std::vector<LoraTarget> parseLoraTargets(const std::string& list) {
  std::vector<bool> chosen(kNumLoraTargets, false);
  std::size_t start = 0;
  bool any = false;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    start = comma + 1;
    if (name.empty())
      ZRT_THROW(InvalidArgument, "--lora-targets '", list, "': an empty name (expected a comma-separated list of ",
                knownNames(), ")");
    any = true;
    if (name == "all") {
      std::fill(chosen.begin(), chosen.end(), true);
      continue;
    }
    const LoraTarget* t = std::find_if(std::begin(kAll), std::end(kAll), [&](LoraTarget x) { return flagName(x) == name; });
    if (t == std::end(kAll))
      ZRT_THROW(InvalidArgument, "--lora-targets: unknown layer '", name, "' (known: ", knownNames(), ")");
    if (chosen[static_cast<std::size_t>(*t)])
      ZRT_THROW(InvalidArgument, "--lora-targets '", list, "': '", name, "' is given twice");
    chosen[static_cast<std::size_t>(*t)] = true;
  }
  if (!any) ZRT_THROW(InvalidArgument, "--lora-targets is empty");
  std::vector<LoraTarget> out;
  for (LoraTarget t : kAll)
    if (chosen[static_cast<std::size_t>(t)]) out.push_back(t);
  return out;
}

std::string joinFlagNames(const std::vector<LoraTarget>& targets) {
  std::string s;
  for (LoraTarget t : targets) s += std::string(s.empty() ? "" : ",") + std::string(flagName(t));
  return s;
}

void validate(const LoraConfig& lora, std::int64_t hidden) {
  if (lora.rank < 1) ZRT_THROW(InvalidArgument, "--lora-rank must be at least 1, got ", lora.rank);
  // Every target's smaller side is the width C: from there on the "low-rank" update can be any
  // matrix, at more parameters than the layer itself.
  if (lora.rank > hidden)
    ZRT_THROW(InvalidArgument, "--lora-rank ", lora.rank, " exceeds the model's width --hidden ", hidden,
              " (an adapter's rank is at most its layer's smaller side)");
  if (!(lora.alpha > 0) || !std::isfinite(lora.alpha))
    ZRT_THROW(InvalidArgument, "--lora-alpha must be a positive number, got ", lora.alpha);
  if (lora.targets.empty()) ZRT_THROW(InvalidArgument, "--lora-targets names no layer");
  std::vector<bool> seen(kNumLoraTargets, false);
  for (LoraTarget t : lora.targets) {
    const int i = static_cast<int>(t);
    if (i < 0 || i >= kNumLoraTargets) ZRT_THROW(InvalidArgument, "--lora-targets: target ", i, " is not a layer");
    if (seen[static_cast<std::size_t>(i)])
      ZRT_THROW(InvalidArgument, "--lora-targets: '", flagName(t), "' is given twice");
    seen[static_cast<std::size_t>(i)] = true;
  }
}

std::string loraAName(int block, LoraTarget t) {
  return "h." + std::to_string(block) + "." + std::string(layerPath(t)) + ".lora_A.weight";
}

std::string loraBName(int block, LoraTarget t) {
  return "h." + std::to_string(block) + "." + std::string(layerPath(t)) + ".lora_B.weight";
}

Initializer uniformInit(std::uint64_t seed, double bound) {
  return [=](float* out, std::uint64_t numel) {
    // The generator's bits mapped by hand (not std::uniform_real_distribution, whose algorithm
    // the standard leaves to the library), as init::normal does.
    std::mt19937_64 gen(seed);
    for (std::uint64_t i = 0; i < numel; ++i) {
      const double u = (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
      out[i] = static_cast<float>(bound * (2.0 * u - 1.0));
    }
  };
}

}  // namespace zrt::trainer
