// The bytes zrt-io writes and, with --verify, checks: each 8-byte word is a hash of (file,
// byte offset), so any block can be generated or checked on its own, in any order, and a
// misplaced block (right data, wrong offset) is caught. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zrt::iotool {

// `offset` (the file offset of buf[0]) must be a multiple of 8.
void fillPattern(std::byte* buf, std::size_t len, std::uint32_t file, std::uint64_t offset);

// The index of the first byte that differs from the pattern, or -1 when all match.
std::int64_t checkPattern(const std::byte* buf, std::size_t len, std::uint32_t file,
                          std::uint64_t offset);

}  // namespace zrt::iotool
