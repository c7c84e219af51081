#include "hf_weights.h"

namespace zrt::trainer {

HfNames::HfNames(const std::vector<RegisteredName>& registered) {
  for (const RegisteredName& r : registered) {
    const std::string full = r.module + "." + r.param;
    engine_.insert(full);
    byParam_.emplace(r.param, full);
  }
}

std::string HfNames::operator()(const std::string& name) const {
  if (engine_.count(name)) return name;
  const std::string prefix = "transformer.";
  const std::string bare = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
  const auto it = byParam_.find(bare);
  return it == byParam_.end() ? name : it->second;
}

}  // namespace zrt::trainer
