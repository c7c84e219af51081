#include "runtime/checkpoint/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/element_arithmetic.h"
#include "core/error.h"
#include "runtime/checkpoint/json_integer.h"

namespace zrt::checkpoint {
namespace {

constexpr std::uint64_t kMaxHeader = std::uint64_t{100} << 20;

DType dtypeOfName(const std::string& s, const std::string& path, const std::string& tensor) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  ZRT_THROW(InvalidArgument, "safetensors: ", path, ": tensor '", tensor, "' has dtype ", s,
            "; ZRT reads F32, F16 and BF16");
}

// The format's own reader (safetensors' Metadata::validate) requires the tensors, in offset
// order, to tile the data exactly: each begins where the previous one ends, the first at 0 and
// the last at the end of the file. An overlap would let two tensors alias one another's bytes,
// and a hole or a tail hides bytes no tensor accounts for; both are refused as it refuses them.
void checkCoverage(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                   std::uint64_t dataBytes) {
  std::vector<const SafetensorsTensor*> order;
  for (const SafetensorsTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  const SafetensorsTensor* prev = nullptr;
  std::uint64_t at = 0;
  for (const SafetensorsTensor* t : order) {
    if (t->begin < at)
      ZRT_THROW(InvalidArgument, "safetensors: ", path, ": tensors '", prev->name,
                "' (data_offsets [", prev->begin, ", ", prev->end, ")) and '", t->name, "' ([",
                t->begin, ", ", t->end,
                ")) overlap; the format requires each tensor's bytes to be its own");
    if (t->begin > at)
      ZRT_THROW(
          InvalidArgument, "safetensors: ", path, ": data bytes [", at, ", ", t->begin,
          ") belong to no tensor (",
          prev ? "between '" + prev->name + "', which ends at " + std::to_string(at) + ", and '"
               : std::string("before '"),
          t->name, "', which begins at ", t->begin,
          "); the format requires the tensors to cover the data without holes");
    at = t->end;
    prev = t;
  }
  if (at != dataBytes)
    ZRT_THROW(InvalidArgument, "safetensors: ", path, ": ", dataBytes - at,
              " bytes follow the last tensor's data (",
              prev ? "'" + prev->name + "' ends at " + std::to_string(at)
                   : std::string("there are no tensors"),
              ", the file holds ", dataBytes,
              " data bytes); the format allows none (truncated header, or bytes appended?)");
}

}  // namespace

std::uint64_t SafetensorsTensor::numel() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::string safetensorsDTypeName(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<SafetensorsTensor> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : tensors_(std::move(tensors)) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (SafetensorsTensor& t : tensors_) {
    t.begin = expected_;
    t.end = t.begin + t.numel() * dtypeSize(t.dtype);
    expected_ = t.end;
    header[t.name] = {{"dtype", safetensorsDTypeName(t.dtype)}, {"shape", t.shape},
                      {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump();
  // Spaces pad the header so the data starts 8-byte aligned, as the reference writer does.
  text.append((8 - (text.size() % 8)) % 8, ' ');
  std::uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  file_ = File::createExclusive(path);
  try {
    file_.writeAll(len, 8);
    file_.writeAll(text.data(), text.size());
  } catch (...) {
    // The file is ours (created exclusively above): a failed constructor leaves nothing behind,
    // so a caller that could not construct never has a file of its own to remove.
    file_ = File();
    ::unlink(path.c_str());
    throw;
  }
}

void SafetensorsWriter::write(const void* data, std::size_t bytes) {
  if (written_ + bytes > expected_)
    ZRT_THROW(Error, "safetensors: ", file_.path(), ": ", written_ + bytes, " data bytes written, the header says ", expected_);
  file_.writeAll(data, bytes);
  written_ += bytes;
}

void SafetensorsWriter::finish() {
  if (written_ != expected_)
    ZRT_THROW(Error, "safetensors: ", file_.path(), ": ", written_, " data bytes written, the header says ", expected_);
  file_.sync();
  file_.close();
}

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(File::openRead(path)) {
  const std::uint64_t size = file_.size();
  if (size < 8) ZRT_THROW(InvalidArgument, "safetensors: ", path, " has ", size, " bytes, fewer than the 8-byte header length");
  unsigned char len[8];
  file_.readAt(len, 8, 0);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeader || n > size - 8)
    ZRT_THROW(InvalidArgument, "safetensors: ", path, ": header length ", n, " exceeds the file (", size,
              " bytes) or 100 MB (not a safetensors file?)");
  std::string text(n, '\0');
  file_.readAt(text.data(), n, 8);
  dataStart_ = 8 + n;
  const std::uint64_t dataBytes = size - dataStart_;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ZRT_THROW(InvalidArgument, "safetensors: ", path, ": the header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) ZRT_THROW(InvalidArgument, "safetensors: ", path, ": the header is not a JSON object");
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) ZRT_THROW(InvalidArgument, "safetensors: ", path, ": __metadata__ is not an object");
      for (const auto& [k, s] : v.items())
        if (s.is_string()) metadata_[k] = s.get<std::string>();
      continue;
    }
    SafetensorsTensor t;
    t.name = name;
    try {
      t.dtype = dtypeOfName(v.at("dtype").get<std::string>(), path, name);
      // Exact integers only: nlohmann would convert a float or a negative silently.
      std::optional<std::vector<std::int64_t>> shape = exactIntegers<std::int64_t>(v.at("shape"));
      if (!shape) ZRT_THROW(InvalidArgument, "safetensors: ", path, ": tensor '", name, "': shape is not an array of integers");
      t.shape = std::move(*shape);
      const auto off = exactIntegers<std::uint64_t>(v.at("data_offsets"));
      if (!off || off->size() != 2)
        ZRT_THROW(InvalidArgument, "safetensors: ", path, ": tensor '", name, "': data_offsets is not [begin, end] (two integers >= 0)");
      t.begin = (*off)[0];
      t.end = (*off)[1];
    } catch (const nlohmann::json::exception& e) {
      ZRT_THROW(InvalidArgument, "safetensors: ", path, ": tensor '", name, "': ", e.what());
    }
    std::uint64_t numel = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0 || (d > 0 && numel > (std::uint64_t{1} << 60) / static_cast<std::uint64_t>(d)))
        ZRT_THROW(InvalidArgument, "safetensors: ", path, ": tensor '", name, "' has a bad shape");
      numel *= static_cast<std::uint64_t>(d);
    }
    if (t.begin > t.end || t.end > dataBytes || t.end - t.begin != numel * dtypeSize(t.dtype))
      ZRT_THROW(InvalidArgument, "safetensors: ", path, ": tensor '", name, "' has data_offsets [", t.begin, ", ",
                t.end, ") that do not fit its shape or the file's ", dataBytes, " data bytes");
    tensors_.push_back(std::move(t));
  }
  checkCoverage(path, tensors_, dataBytes);
}

const SafetensorsTensor* SafetensorsReader::find(const std::string& name) const {
  for (const SafetensorsTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsReader::read(const SafetensorsTensor& t, std::uint64_t begin, std::uint64_t count, DType dtype,
                             void* out) const {
  const std::uint64_t numel = t.numel();
  if (begin > numel || count > numel - begin)
    ZRT_THROW(InvalidArgument, "safetensors: ", path(), ": elements ", begin, "+", count, " of '", t.name, "' are past its ", numel);
  const std::size_t es = dtypeSize(t.dtype);
  const std::uint64_t at = dataStart_ + t.begin + begin * es;
  if (t.dtype == dtype) {
    file_.readAt(out, count * es, at);
    return;
  }
  std::vector<char> staging(count * es);
  file_.readAt(staging.data(), staging.size(), at);
  for (std::uint64_t i = 0; i < count; ++i) zrt::storeElement(dtype, out, i, zrt::loadElement(t.dtype, staging.data(), i));
}

}  // namespace zrt::checkpoint
