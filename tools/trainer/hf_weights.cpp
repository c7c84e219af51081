#include "hf_weights.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/safetensors.h"

namespace zrt::trainer {

std::vector<std::string> engineNames(const std::vector<std::string>& names,
                                     const std::vector<RegisteredName>& registered) {
  std::set<std::string> engine;
  std::map<std::string, std::string> byParam;
  for (const RegisteredName& r : registered) {
    const std::string full = r.module + "." + r.param;
    engine.insert(full);
    byParam.emplace(r.param, full);
  }
  const std::string prefix = "transformer.";
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const std::string& n : names) {
    if (engine.count(n)) {
      out.push_back(n);
      continue;
    }
    const std::string bare = n.rfind(prefix, 0) == 0 ? n.substr(prefix.size()) : n;
    const auto it = byParam.find(bare);
    out.push_back(it == byParam.end() ? n : it->second);
  }
  return out;
}

WeightsForEngine::WeightsForEngine(const std::string& path, const std::vector<RegisteredName>& registered)
    : path_(path) {
  using namespace zrt::checkpoint;
  if (!isRegularFile(path)) return;  // a checkpoint directory, or nothing: loadWeights says which
  const SafetensorsReader in(path);
  std::vector<std::string> names;
  for (const SafetensorsTensor& t : in.tensors()) names.push_back(t.name);
  const std::vector<std::string> mapped = engineNames(names, registered);
  if (mapped == names) return;

  const char* tmp = std::getenv("TMPDIR");
  tempDir_ = makeTempDirectory(tmp && *tmp ? tmp : "/tmp", "zrt-train-init-from-");
  try {
    std::vector<SafetensorsTensor> tensors = in.tensors();
    for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].name = mapped[i];
    std::map<std::string, std::string> metadata = in.metadata();
    metadata["zrt_renamed_from"] = path;
    const std::string copy = joinPath(tempDir_, "model.safetensors");
    SafetensorsWriter out(copy, tensors, metadata);
    // Tensor by tensor, in the file's own dtype: a copy of the bytes, not a conversion.
    std::vector<unsigned char> buffer;
    for (const SafetensorsTensor& t : in.tensors()) {
      buffer.resize(static_cast<std::size_t>(t.end - t.begin));
      if (!buffer.empty()) in.read(t, 0, t.numel(), t.dtype, buffer.data());
      out.write(buffer.data(), buffer.size());
    }
    out.finish();
    path_ = copy;
  } catch (const std::exception& e) {
    const std::string left = removeTree(tempDir_);
    tempDir_.clear();
    ZRT_THROW(IoError, "--init-from ", path, ": copying it under the engine's parameter names into $TMPDIR failed: ",
              e.what(), left.empty() ? "" : " (and removing the copy: " + left + ")");
  }
}

WeightsForEngine::~WeightsForEngine() {
  if (tempDir_.empty()) return;
  // Never throw from a destructor: a copy left behind is reported, not fatal.
  const std::string left = checkpoint::removeTree(tempDir_);
  if (!left.empty()) std::fprintf(stderr, "zrt-train: could not remove %s: %s\n", tempDir_.c_str(), left.c_str());
}

}  // namespace zrt::trainer
