#include "runtime/checkpoint/manifest.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>

#include "core/error.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/json_integer.h"

namespace zrt::checkpoint {
namespace {

using nlohmann::json;

template <class T>
inline constexpr bool kIsIntegerVector = false;
template <class T>
inline constexpr bool kIsIntegerVector<std::vector<T>> = std::is_integral_v<T>;

// The value at `key`, of the type asked for, or InvalidArgument naming the file and the key.
// Integers must be JSON integers in the type's range (json_integer.h): nlohmann would convert a
// float or an out-of-range value silently.
template <class T>
T get(const json& j, const char* key, const std::string& source) {
  if (!j.is_object() || !j.contains(key))
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": key '", key, "' is missing");
  const json& v = j.at(key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (const std::optional<T> x = exactInteger<T>(v)) return *x;
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": key '", key, "' is ", v.dump(),
              ", not an integer from ", +std::numeric_limits<T>::min(), " to ", +std::numeric_limits<T>::max());
  } else if constexpr (kIsIntegerVector<T>) {
    using E = typename T::value_type;
    if (std::optional<T> x = exactIntegers<E>(v)) return std::move(*x);
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": key '", key, "' is not an array of integers from ",
              +std::numeric_limits<E>::min(), " to ", +std::numeric_limits<E>::max());
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception& e) {
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": key '", key, "' has the wrong type (", e.what(), ")");
    }
  }
}

std::uint64_t parseHex(const std::string& s, const std::string& source) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": checksum '", s, "' is not 16 hex digits");
  return std::stoull(s, nullptr, 16);
}

bool plainFileName(const std::string& p) {
  return !p.empty() && p != "." && p != ".." && p.find('/') == std::string::npos &&
         p.find('\0') == std::string::npos && p.size() < 256;
}

// count * size without overflow, or InvalidArgument.
std::uint64_t bytesOf(std::uint64_t count, DType t, const std::string& source) {
  if (count > (std::uint64_t{1} << 60)) ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": element count ", count, " is absurd");
  return count * dtypeSize(t);
}

}  // namespace

const ManifestState* Manifest::state(const std::string& name) const {
  for (const ManifestState& s : states)
    if (s.name == name) return &s;
  return nullptr;
}

const ManifestParam* Manifest::param(const std::string& fullName) const {
  for (const ManifestParam& p : params)
    if (p.fullName() == fullName) return &p;
  return nullptr;
}

json toJson(const ManifestFile& f) {
  json j = {{"path", f.path}, {"state", f.state}, {"rank", f.rank}, {"begin", f.begin},
            {"count", f.count}, {"bytes", f.bytes}, {"xxh3_64", hexDigest(f.xxh3)}};
  return j;
}

ManifestFile fileFromJson(const json& j, const std::string& source) {
  ManifestFile f;
  f.path = get<std::string>(j, "path", source);
  f.state = get<std::string>(j, "state", source);
  f.rank = get<int>(j, "rank", source);
  f.begin = get<std::uint64_t>(j, "begin", source);
  f.count = get<std::uint64_t>(j, "count", source);
  f.bytes = get<std::uint64_t>(j, "bytes", source);
  f.xxh3 = parseHex(get<std::string>(j, "xxh3_64", source), source);
  return f;
}

json toJson(const Manifest& m) {
  json params = json::array();
  for (const ManifestParam& p : m.params)
    params.push_back({{"module", p.module}, {"name", p.name}, {"shape", p.shape},
                      {"dtype", std::string(nameOf(m.dtype))}, {"trainable", p.trainable},
                      {"group", p.group}, {"offset", p.offset}, {"numel", p.numel}});
  json states = json::array();
  for (const ManifestState& s : m.states)
    states.push_back({{"name", s.name}, {"buffer", s.trainableBuffer ? "trainable" : "frozen"},
                      {"dtype", std::string(nameOf(s.dtype))}, {"numel", s.numel}});
  json files = json::array();
  for (const ManifestFile& f : m.files) files.push_back(toJson(f));
  return {{"format", kFormatName},
          {"format_version", m.formatVersion},
          {"tag", m.tag},
          {"world_size", m.worldSize},
          {"zero_stage", m.stage},
          {"training_dtype", std::string(nameOf(m.dtype))},
          {"optimizer", m.optimizer},
          {"byte_order", "little"},
          {"buffers", {{"trainable", {{"numel", m.trainableNumel}}}, {"frozen", {{"numel", m.frozenNumel}}}}},
          {"parameters", params},
          {"states", states},
          {"files", files},
          {"metadata", m.metadata}};
}

Manifest manifestFromJson(const json& j, const std::string& source) {
  if (!j.is_object()) ZRT_THROW(InvalidArgument, "checkpoint: ", source, " is not a JSON object");
  const std::string format = get<std::string>(j, "format", source);
  if (format != kFormatName)
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": format '", format, "' is not '", kFormatName, "'");
  Manifest m;
  m.formatVersion = get<int>(j, "format_version", source);
  if (m.formatVersion != kFormatVersion)
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": format version ", m.formatVersion,
              " is not one this build reads (version ", kFormatVersion, ")");
  if (get<std::string>(j, "byte_order", source) != "little")
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": byte_order is not 'little'");
  m.tag = get<std::string>(j, "tag", source);
  m.worldSize = get<int>(j, "world_size", source);
  m.stage = get<int>(j, "zero_stage", source);
  if (m.worldSize < 1 || m.worldSize > (1 << 24))
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": world_size ", m.worldSize, " is out of range");
  if (m.stage < 0 || m.stage > 3) ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": zero_stage ", m.stage, " is not 0-3");
  try {
    m.dtype = parseDType(get<std::string>(j, "training_dtype", source));
  } catch (const Error& e) {
    ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": training_dtype: ", e.what());
  }
  m.optimizer = get<std::string>(j, "optimizer", source);
  const json buffers = get<json>(j, "buffers", source);
  m.trainableNumel = get<std::uint64_t>(get<json>(buffers, "trainable", source), "numel", source);
  m.frozenNumel = get<std::uint64_t>(get<json>(buffers, "frozen", source), "numel", source);

  // Absent from checkpoints saved before it existed: those read as an empty object.
  if (j.contains("metadata")) {
    m.metadata = j.at("metadata");
    if (!m.metadata.is_object())
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": key 'metadata' is not a JSON object");
  }

  std::set<std::string> names;
  for (const json& p : get<json>(j, "parameters", source)) {
    ManifestParam q;
    q.module = get<std::string>(p, "module", source);
    q.name = get<std::string>(p, "name", source);
    q.shape = get<std::vector<std::int64_t>>(p, "shape", source);
    q.trainable = get<bool>(p, "trainable", source);
    q.group = get<int>(p, "group", source);
    q.offset = get<std::uint64_t>(p, "offset", source);
    q.numel = get<std::uint64_t>(p, "numel", source);
    std::uint64_t n = 1;
    for (std::int64_t d : q.shape) {
      if (d < 0 || (d > 0 && n > (std::uint64_t{1} << 60) / static_cast<std::uint64_t>(d)))
        ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": parameter '", q.fullName(), "' has a bad shape");
      n *= static_cast<std::uint64_t>(d);
    }
    const std::uint64_t limit = q.trainable ? m.trainableNumel : m.frozenNumel;
    if (n != q.numel || q.offset > limit || q.numel > limit - q.offset)
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": parameter '", q.fullName(), "' (offset ",
                q.offset, ", ", q.numel, " elements) does not fit its shape or its ", limit, "-element buffer");
    if (!names.insert(q.fullName()).second)
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": parameter '", q.fullName(), "' is listed twice");
    m.params.push_back(std::move(q));
  }
  for (const json& s : get<json>(j, "states", source)) {
    ManifestState t;
    t.name = get<std::string>(s, "name", source);
    const std::string buffer = get<std::string>(s, "buffer", source);
    if (buffer != "trainable" && buffer != "frozen")
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": state '", t.name, "' has buffer '", buffer, "'");
    t.trainableBuffer = buffer == "trainable";
    try {
      t.dtype = parseDType(get<std::string>(s, "dtype", source));
    } catch (const Error& e) {
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": state '", t.name, "': ", e.what());
    }
    t.numel = get<std::uint64_t>(s, "numel", source);
    if (t.numel != (t.trainableBuffer ? m.trainableNumel : m.frozenNumel))
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": state '", t.name, "' has ", t.numel,
                " elements, its buffer ", (t.trainableBuffer ? m.trainableNumel : m.frozenNumel));
    if (m.state(t.name)) ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": state '", t.name, "' is listed twice");
    m.states.push_back(std::move(t));
  }
  std::set<std::string> paths;
  for (const json& f : get<json>(j, "files", source)) {
    ManifestFile g = fileFromJson(f, source);
    if (!plainFileName(g.path) || g.path == kManifestName)
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": file '", g.path, "' is not a plain file name in the checkpoint");
    if (!paths.insert(g.path).second) ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": file '", g.path, "' is listed twice");
    if (g.rank < 0 || g.rank >= m.worldSize)
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": file '", g.path, "' names rank ", g.rank,
                " of a ", m.worldSize, "-rank world");
    if (g.state != "engine") {
      const ManifestState* s = m.state(g.state);
      if (!s) ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": file '", g.path, "' holds unknown state '", g.state, "'");
      if (g.begin > s->numel || g.count > s->numel - g.begin || g.bytes != bytesOf(g.count, s->dtype, source))
        ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": file '", g.path, "' (elements ", g.begin, "+",
                  g.count, ", ", g.bytes, " bytes) does not fit state '", g.state, "' (", s->numel, " elements of ",
                  nameOf(s->dtype), ")");
    }
    m.files.push_back(std::move(g));
  }
  // Each state's files must tile its buffer: a gap is a file missing from the list.
  for (const ManifestState& s : m.states) {
    std::vector<const ManifestFile*> fs;
    for (const ManifestFile& f : m.files)
      if (f.state == s.name) fs.push_back(&f);
    std::sort(fs.begin(), fs.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    std::uint64_t at = 0;
    for (const ManifestFile* f : fs) {
      if (f->begin != at)
        ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": state '", s.name, "' has ",
                  (f->begin > at ? "no file for elements " : "overlapping files at elements "),
                  std::min(at, f->begin), "..", std::max(at, f->begin), " (at file '", f->path, "')");
      at += f->count;
    }
    if (at != s.numel)
      ZRT_THROW(InvalidArgument, "checkpoint: ", source, ": state '", s.name, "' has files for ", at,
                " of its ", s.numel, " elements");
  }
  return m;
}

Manifest readManifest(const std::string& checkpointDir) {
  const std::string path = joinPath(checkpointDir, kManifestName);
  if (!pathExists(path))
    ZRT_THROW(InvalidArgument, "checkpoint: ", path, " does not exist (not a checkpoint, or its save did not finish)");
  const std::string text = readSmallFile(path, kMaxManifestBytes);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    ZRT_THROW(InvalidArgument, "checkpoint: ", path, " is not valid JSON: ", e.what());
  }
  return manifestFromJson(j, path);
}

}  // namespace zrt::checkpoint
