// Reads a saved checkpoint back by element range, whatever world size and stage wrote it: a
// state's range [begin, begin + count) is assembled from the files that overlap it (positioned
// reads of just the overlapping bytes), converted to the dtype asked for. Checksums are checked
// by verifyFile(), which reads a whole file; the engine's load spreads that over the ranks and
// agrees before reading anything into the engine, and zrt-ckpt verify checks every file.
// Thread-safety: const methods may run concurrently (each opens its own descriptors).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "runtime/checkpoint/manifest.h"

namespace zrt::checkpoint {

// The tag `tag` names: itself, or for "" and "latest" the tag in <dir>/latest. Refuses tags that
// are not a plain directory name.
std::string resolveTag(const std::string& dir, const std::string& tag);
// Throws InvalidArgument unless `tag` can name a checkpoint directory inside <dir>.
void checkTagName(const std::string& tag);

class CheckpointReader {
 public:
  // <checkpointDir> holds manifest.json (<dir>/<tag> as save() writes it).
  explicit CheckpointReader(std::string checkpointDir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  std::string pathOf(const ManifestFile& f) const;

  // What is wrong with file i of the manifest (missing, another size, another checksum), or "".
  std::string verifyFile(std::size_t i) const;
  // Elements [begin, begin + count) of `state` as `dtype` (converted when the state's dtype
  // differs) into `out`.
  void read(const std::string& state, std::uint64_t begin, std::uint64_t count, DType dtype, void* out) const;
  // Elements [begin, begin + count) of parameter p (0 = its first element) as `dtype`: from the
  // training-dtype parameters when `dtype` is theirs (the exact bits trained with), else from
  // the fp32 master weights when they were saved (rounded once), else converted.
  void readParameter(const ManifestParam& p, std::uint64_t begin, std::uint64_t count, DType dtype, void* out) const;
  // The same in fp32 for a master copy: the master weights when saved, else the parameters.
  void readParameterMaster(const ManifestParam& p, std::uint64_t begin, std::uint64_t count, float* out) const;
  // engine_state.json (step counters, loss scaler), checked against its manifest entry's size.
  nlohmann::json engineState() const;

 private:
  std::string dir_;
  Manifest manifest_;
};

}  // namespace zrt::checkpoint
