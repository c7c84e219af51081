#include "data_pattern.h"

#include <cstring>

#include "core/error.h"

namespace zrt::iotool {
namespace {

inline std::uint64_t wordAt(std::uint32_t file, std::uint64_t wordIndex) {
  // splitmix64's finaliser over (file, word): cheap and well mixed.
  std::uint64_t z = wordIndex + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(file) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void fillPattern(std::byte* buf, std::size_t len, std::uint32_t file, std::uint64_t offset) {
  ZRT_ENFORCE(offset % 8 == 0, "pattern offset ", offset, " is not a multiple of 8");
  const std::uint64_t first = offset / 8;
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const std::uint64_t w = wordAt(file, first + i / 8);
    std::memcpy(buf + i, &w, 8);
  }
  if (i < len) {
    const std::uint64_t w = wordAt(file, first + i / 8);
    std::memcpy(buf + i, &w, len - i);
  }
}

std::int64_t checkPattern(const std::byte* buf, std::size_t len, std::uint32_t file,
                          std::uint64_t offset) {
  ZRT_ENFORCE(offset % 8 == 0, "pattern offset ", offset, " is not a multiple of 8");
  const std::uint64_t first = offset / 8;
  for (std::size_t i = 0; i < len; i += 8) {
    const std::uint64_t w = wordAt(file, first + i / 8);
    const std::size_t n = len - i < 8 ? len - i : 8;
    if (std::memcmp(buf + i, &w, n) != 0) {
      for (std::size_t j = 0; j < n; ++j) {
        if (buf[i + j] != reinterpret_cast<const std::byte*>(&w)[j])
          return static_cast<std::int64_t>(i + j);
      }
    }
  }
  return -1;
}

}  // namespace zrt::iotool
