// The checkpoint manifest (manifest.json, written last by rank 0): what was saved, by whom, and
// where every element lives. Every model state is a range of one flat buffer (trainable or
// frozen) laid out in registration order with padding only at the end, so the unpadded buffer is
// the same for any world size and stage; a file holds elements [begin, begin + count) of one
// state. Reading a state's range back is a matter of finding the files that overlap it, which
// is why a checkpoint loads on any number of ranks and at any stage (docs/checkpoint.md).
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace zrt::checkpoint {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kFormatName = "zrt-checkpoint";
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kEngineStateName = "engine_state.json";
inline constexpr const char* kLatestName = "latest";
// Sizes a manifest or engine-state file may have; beyond them the file is refused as corrupt
// before it is read into memory.
inline constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{256} << 20;
inline constexpr std::uint64_t kMaxEngineStateBytes = std::uint64_t{1} << 20;

struct ManifestParam {
  std::string module;
  std::string name;  // within the module
  std::vector<std::int64_t> shape;
  bool trainable = true;
  int group = 0;
  std::uint64_t offset = 0;  // in the trainable or the frozen flat buffer
  std::uint64_t numel = 0;
  std::string fullName() const { return module + "/" + name; }
};

// One saved state: "params" (trainable, training dtype), "frozen_params", "master" (fp32) and
// the optimizer's moments ("exp_avg", "exp_avg_sq" for Adam/AdamW, "momentum_buffer" for SGD).
struct ManifestState {
  std::string name;
  bool trainableBuffer = true;  // which flat buffer it is a range of
  DType dtype = DType::F32;
  std::uint64_t numel = 0;      // the buffer's unpadded length
};

struct ManifestFile {
  std::string path;   // a plain file name inside the checkpoint directory
  std::string state;  // a ManifestState name, or "engine" for engine_state.json
  int rank = 0;       // the rank that wrote it
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};

struct Manifest {
  int formatVersion = kFormatVersion;
  std::string tag;
  int worldSize = 1;
  int stage = 0;
  DType dtype = DType::F32;  // training dtype
  std::string optimizer;     // "adam", "adamw", "sgd"
  std::uint64_t trainableNumel = 0;
  std::uint64_t frozenNumel = 0;
  std::vector<ManifestParam> params;
  std::vector<ManifestState> states;
  std::vector<ManifestFile> files;
  // The training program's own description of what it saved (an object, empty when it gave
  // none, as in checkpoints written before the key existed); ZRT stores it verbatim. zrt-ckpt
  // export reads its "lora" entry (docs/checkpoint.md).
  nlohmann::json metadata = nlohmann::json::object();

  const ManifestState* state(const std::string& name) const;
  const ManifestParam* param(const std::string& fullName) const;
};

nlohmann::json toJson(const Manifest& m);
// Parses and checks a manifest: the format and its version, every size and range in bounds,
// file names that stay inside the directory, and each state's files tiling [0, numel) exactly
// (so a file missing from the list is found here). `source` names the file in errors.
Manifest manifestFromJson(const nlohmann::json& j, const std::string& source);
// <checkpointDir>/manifest.json, read (size-capped) and checked.
Manifest readManifest(const std::string& checkpointDir);

nlohmann::json toJson(const ManifestFile& f);
ManifestFile fileFromJson(const nlohmann::json& j, const std::string& source);

}  // namespace zrt::checkpoint
