#include "runtime/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/element_arithmetic.h"
#include "core/error.h"
#include "runtime/checkpoint/file_io.h"

namespace zrt::checkpoint {

void checkTagName(const std::string& tag) {
  if (tag.empty() || tag == "." || tag == ".." || tag == kLatestName || tag.size() > 200 ||
      tag.find('/') != std::string::npos || tag.find(".tmp-") != std::string::npos ||
      tag.find_first_of(std::string("\0\n", 2)) != std::string::npos)
    ZRT_THROW(InvalidArgument, "checkpoint: tag '", tag, "' cannot name a checkpoint directory (it must be a "
              "plain name, not 'latest', without '/' or '.tmp-')");
}

std::string resolveTag(const std::string& dir, const std::string& tag) {
  if (!tag.empty() && tag != kLatestName) {
    checkTagName(tag);
    return tag;
  }
  const std::string path = joinPath(dir, kLatestName);
  if (!pathExists(path)) ZRT_THROW(InvalidArgument, "checkpoint: ", path, " does not exist: no checkpoint was saved in ", dir);
  std::string t = readSmallFile(path, 4096);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  try {
    checkTagName(t);
  } catch (const InvalidArgument& e) {
    ZRT_THROW(InvalidArgument, "checkpoint: ", path, " does not hold a tag: ", e.what());
  }
  return t;
}

CheckpointReader::CheckpointReader(std::string checkpointDir)
    : dir_(std::move(checkpointDir)), manifest_(readManifest(dir_)) {}

std::string CheckpointReader::pathOf(const ManifestFile& f) const { return joinPath(dir_, f.path); }

std::string CheckpointReader::verifyFile(std::size_t i) const {
  const ManifestFile& f = manifest_.files.at(i);
  const std::string path = pathOf(f);
  if (!pathExists(path)) return path + ": missing (the manifest lists it, written by rank " + std::to_string(f.rank) + ")";
  if (!isRegularFile(path)) return path + ": not a regular file";
  try {
    const FileDigest d = digestFile(path);
    if (d.bytes != f.bytes)
      return path + ": " + std::to_string(d.bytes) + " bytes, the manifest says " + std::to_string(f.bytes) +
             (d.bytes < f.bytes ? " (truncated)" : "");
    if (d.xxh3 != f.xxh3)
      return path + ": checksum xxh3 " + hexDigest(d.xxh3) + ", the manifest says " + hexDigest(f.xxh3) + " (corrupt)";
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

void CheckpointReader::read(const std::string& state, std::uint64_t begin, std::uint64_t count, DType dtype,
                            void* out) const {
  const ManifestState* s = manifest_.state(state);
  if (!s) ZRT_THROW(InvalidArgument, "checkpoint: ", dir_, " has no state '", state, "'");
  if (begin > s->numel || count > s->numel - begin)
    ZRT_THROW(InvalidArgument, "checkpoint: elements ", begin, "+", count, " of state '", state, "' are past its ",
              s->numel, " elements (", dir_, ")");
  const std::size_t es = dtypeSize(s->dtype), eo = dtypeSize(dtype);
  std::vector<char> staging;
  for (const ManifestFile& f : manifest_.files) {
    if (f.state != state) continue;
    const std::uint64_t lo = std::max(begin, f.begin), hi = std::min(begin + count, f.begin + f.count);
    if (lo >= hi) continue;
    const File file = File::openRead(pathOf(f));
    if (file.size() != f.bytes)
      ZRT_THROW(IoError, "checkpoint: ", pathOf(f), " has ", file.size(), " bytes, the manifest says ", f.bytes);
    char* dst = static_cast<char*>(out) + (lo - begin) * eo;
    const std::uint64_t n = hi - lo;
    if (s->dtype == dtype) {
      file.readAt(dst, n * es, (lo - f.begin) * es);
      continue;
    }
    staging.resize(n * es);
    file.readAt(staging.data(), staging.size(), (lo - f.begin) * es);
    for (std::uint64_t i = 0; i < n; ++i)
      zrt::storeElement(dtype, dst, i, zrt::loadElement(s->dtype, staging.data(), i));
  }
}

void CheckpointReader::readParameter(const ManifestParam& p, std::uint64_t begin, std::uint64_t count, DType dtype,
                                     void* out) const {
  if (begin > p.numel || count > p.numel - begin)
    ZRT_THROW(InvalidArgument, "checkpoint: elements ", begin, "+", count, " of '", p.fullName(), "' are past its ", p.numel);
  const char* params = p.trainable ? "params" : "frozen_params";
  const bool fromMaster = p.trainable && manifest_.dtype != dtype && manifest_.state("master");
  read(fromMaster ? "master" : params, p.offset + begin, count, dtype, out);
}

void CheckpointReader::readParameterMaster(const ManifestParam& p, std::uint64_t begin, std::uint64_t count,
                                           float* out) const {
  if (p.trainable && manifest_.state("master")) {
    if (begin > p.numel || count > p.numel - begin)
      ZRT_THROW(InvalidArgument, "checkpoint: elements ", begin, "+", count, " of '", p.fullName(), "' are past its ", p.numel);
    read("master", p.offset + begin, count, DType::F32, out);
  } else {
    readParameter(p, begin, count, DType::F32, out);
  }
}

nlohmann::json CheckpointReader::engineState() const {
  for (const ManifestFile& f : manifest_.files) {
    if (f.state != "engine") continue;
    const std::string text = readSmallFile(pathOf(f), kMaxEngineStateBytes);
    if (text.size() != f.bytes)
      ZRT_THROW(IoError, "checkpoint: ", pathOf(f), " has ", text.size(), " bytes, the manifest says ", f.bytes);
    try {
      return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      ZRT_THROW(IoError, "checkpoint: ", pathOf(f), " is not valid JSON: ", e.what());
    }
  }
  ZRT_THROW(InvalidArgument, "checkpoint: ", joinPath(dir_, kManifestName), " lists no engine state file");
}

}  // namespace zrt::checkpoint
