// Saving and loading an Engine's whole training state (Engine::save / load / loadWeights call
// these). Layout and format: docs/checkpoint.md; in short, <dir>/<tag>/ holds one raw file per
// state per rank (the rank's slice of each flat buffer), engine_state.json and manifest.json.
//
// save() is atomic: files go to <dir>/<tag>.tmp-XXXXXX, are fsynced, rank 0 writes the manifest
// last, fsyncs the directory and renames it to <dir>/<tag> (never replacing one), then replaces
// <dir>/latest (temporary file, fsync, rename, fsync). A crash at any point leaves every earlier
// checkpoint and `latest` loadable; a failure on any rank throws on every rank and removes the
// temporary directory. Refused between accumulation boundaries (the partial gradients are not
// saved).
//
// load() reads a checkpoint written by any world size and stage: each rank reads the ranges of
// its own buffers from the files that overlap them. The model must match (every difference is
// named), as must the training dtype and the optimizer's state. Checksums are verified, spread
// over the ranks, before anything in the engine is overwritten.
//
// loadWeights() fills the parameters (and master weights) only, matching by name, from a ZRT
// checkpoint directory or a safetensors file (names "<module>.<param>", or whatever names
// `rename`, when given, maps to those), converting dtypes; the parameters named in `mayBeMissing`
// ("<module>/<param>") may be absent and then keep their values.
//
// All three are collective; an error on one rank is thrown on every rank.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/checkpoint/engine_view.h"
#include "runtime/checkpoint/manifest.h"

namespace zrt::checkpoint {

// `metadata` (a JSON object, possibly empty) goes verbatim into the manifest's "metadata".
void save(const EngineView& engine, const std::string& dir, const std::string& tag, const nlohmann::json& metadata);
void load(const EngineView& engine, const std::string& dir, const std::string& tag);
void loadWeights(const EngineView& engine, const std::string& path, const std::vector<std::string>& mayBeMissing,
                 const std::function<std::string(const std::string&)>& rename = {});

// The name a parameter has in a safetensors file: "<module>.<param>", Hugging Face's style.
std::string safetensorsName(const std::string& module, const std::string& param);

// One line per difference between the checkpoint's model and the engine's (missing, extra,
// shape; with `exact` also trainable/frozen, registration order, dtype and optimizer state).
// Parameters in `mayBeMissing` ("<module>/<param>") are not differences when absent.
std::vector<std::string> modelDifferences(const Manifest& m, const EngineView& engine, bool exact,
                                          const std::vector<std::string>& mayBeMissing = {});

}  // namespace zrt::checkpoint
