// --init-from a safetensors file written with Hugging Face's GPT-2 names ("wte.weight",
// "h.0.ln_1.weight", "ln_f.weight", optionally under "transformer."). Engine::loadWeights matches
// safetensors tensors by "<module>.<param>", and the trainer registers each parameter under its
// Hugging Face name inside a module ("embed", "h.0", ..., "ln_f"), so the engine expects
// "embed.wte.weight", "h.0.h.0.ln_1.weight", "ln_f.ln_f.weight" (what zrt-ckpt export writes).
// The Engine takes no name mapping, so a file under the Hugging Face names is copied, renamed,
// into a private temporary file that loadWeights then reads.
// Thread-safety: one thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zrt::trainer {

// A parameter as the Engine registered it.
struct RegisteredName {
  std::string module;
  std::string param;
};

// The engine's name for each tensor name in `names`: unchanged when it already is one, else the
// "<module>.<param>" whose param is the name (after dropping a "transformer." prefix). A name
// matching neither is kept, so loadWeights lists it among the differences.
std::vector<std::string> engineNames(const std::vector<std::string>& names,
                                     const std::vector<RegisteredName>& registered);

// What loadWeights should read for `path`: `path` itself (a checkpoint directory, or a
// safetensors file already under the engine's names), or a renamed copy in a temporary
// directory under $TMPDIR (or /tmp), removed when this object is destroyed.
class WeightsForEngine {
 public:
  WeightsForEngine(const std::string& path, const std::vector<RegisteredName>& registered);
  ~WeightsForEngine();
  WeightsForEngine(const WeightsForEngine&) = delete;
  WeightsForEngine& operator=(const WeightsForEngine&) = delete;
  const std::string& path() const { return path_; }
  bool renamed() const { return !tempDir_.empty(); }

 private:
  std::string path_;
  std::string tempDir_;
};

}  // namespace zrt::trainer
