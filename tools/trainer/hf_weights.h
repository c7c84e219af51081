// --init-from a safetensors file written with Hugging Face's GPT-2 names ("wte.weight",
// "h.0.ln_1.weight", "ln_f.weight", optionally under "transformer."). Engine::loadWeights matches
// safetensors tensors by "<module>.<param>", and the trainer registers each parameter under its
// Hugging Face name inside a module ("embed", "h.0", ..., "ln_f"), so the engine expects
// "embed.wte.weight", "h.0.h.0.ln_1.weight", "ln_f.ln_f.weight" (what zrt-ckpt export writes).
// HfNames is the rename loadWeights takes, so the file is read where it is.
// Thread-safety: const after construction.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace zrt::trainer {

// A parameter as the Engine registered it.
struct RegisteredName {
  std::string module;
  std::string param;
};

class HfNames {
 public:
  explicit HfNames(const std::vector<RegisteredName>& registered);
  // The engine's name for a tensor name: unchanged when it already is one, else the
  // "<module>.<param>" whose param is the name (after dropping a "transformer." prefix). A name
  // matching neither is kept, so loadWeights lists it among the differences.
  std::string operator()(const std::string& name) const;

 private:
  std::set<std::string> engine_;
  std::map<std::string, std::string> byParam_;
};

}  // namespace zrt::trainer
