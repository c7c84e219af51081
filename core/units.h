// Byte sizes as people write them ("4K", "1.5G", "2e8") and as the runtime prints them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zrt {

// Parses "4096", "4K", "64M", "1.5G", "2T", "2e8", with an optional trailing "B" or "iB";
// suffixes are binary (K = 1024). Throws InvalidArgument naming `what` on anything else.
std::uint64_t parseBytes(std::string_view text, std::string_view what = "size");

// "512 B", "1.50 KiB", "3.00 GiB".
std::string formatBytes(std::uint64_t bytes);

}  // namespace zrt
