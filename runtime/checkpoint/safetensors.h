// The safetensors format (what PyTorch and Hugging Face load): an 8-byte little-endian header
// length N, N bytes of JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets relative to the data after the header) plus an optional
// "__metadata__" map of strings, then the raw little-endian data. Only F32, F16 and BF16
// tensors are read or written here (the dtypes ZRT trains in).
// Thread-safety: a writer or reader is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/checkpoint/file_io.h"

namespace zrt::checkpoint {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // data offsets, relative to the end of the header
  std::uint64_t end = 0;
  std::uint64_t numel() const;
};

std::string safetensorsDTypeName(DType t);  // "F32", "F16", "BF16"

// Writes the header for `tensors` (in order, offsets assigned here) at once; the caller then
// hands over each tensor's bytes in the same order, and finish() checks that every byte came,
// fsyncs and closes. The file is created exclusively (0600, never through a link); a constructor
// that throws leaves no file behind.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<SafetensorsTensor> tensors,
                    const std::map<std::string, std::string>& metadata);
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  void write(const void* data, std::size_t bytes);
  void finish();

 private:
  File file_;
  std::vector<SafetensorsTensor> tensors_;
  std::uint64_t expected_ = 0;
  std::uint64_t written_ = 0;
};

class SafetensorsReader {
 public:
  // Reads and checks the header: its length within the file (and at most 100 MB), valid JSON,
  // known dtypes, every tensor's offsets inside the data and equal to its shape's bytes, and
  // the tensors covering the data exactly, as the format requires (no overlap, no hole, no
  // bytes after the last tensor).
  explicit SafetensorsReader(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  // Elements [begin, begin + count) of tensor t, as `dtype`.
  void read(const SafetensorsTensor& t, std::uint64_t begin, std::uint64_t count, DType dtype, void* out) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  File file_;
  std::uint64_t dataStart_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace zrt::checkpoint
