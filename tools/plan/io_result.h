// Reads NVMe bandwidth from a zrt-io result file (`zrt-io --json`: one JSON object per line with
// at least "mode", "bytes", "seconds", "gbps", GB = 1e9). Pure parsing; thread-safe.
#pragma once

#include <filesystem>
#include <string>

namespace zrt::plan {

struct NvmeBandwidth {
  double readBps = 0;   // bytes per second, the best "read" result
  double writeBps = 0;  // the best "write" result
  std::string source;   // "zrt-io FILE: read ... GB/s, write ... GB/s"
};

// The best read and write results; a file with only "rw" results uses them for both. Throws
// InvalidArgument naming the file and line on malformed input or when no result is usable.
NvmeBandwidth parseIoResults(const std::string& text, const std::string& source);
NvmeBandwidth readIoResults(const std::filesystem::path& file);

}  // namespace zrt::plan
