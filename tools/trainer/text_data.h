// The training text: any file read as bytes (the vocabulary is the 256 byte values), split into
// the first floor(0.9 * length) bytes for training and the rest for validation, so the split is
// a function of the file alone and every rank and run agrees on it.
// Thread-safety: a TextData is plain, read-only data once loaded.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zrt::trainer {

struct TextData {
  std::string path;
  std::vector<std::uint8_t> bytes;
  std::size_t trainBytes = 0;

  std::span<const std::uint8_t> train() const { return {bytes.data(), trainBytes}; }
  std::span<const std::uint8_t> validation() const {
    return {bytes.data() + trainBytes, bytes.size() - trainBytes};
  }
};

// floor(0.9 * length), in integers so no rounding of 0.9 moves a byte between the splits.
std::size_t trainSplit(std::size_t length);

// Reads `path` and splits it. Throws InvalidArgument naming --data and the file when it cannot be
// read, and when either split is too short for one sample of `seqLen` (each needs seqLen + 2
// bytes: a start, T inputs and the target one further, with at least one start to choose).
TextData loadText(const std::string& path, int seqLen);

}  // namespace zrt::trainer
