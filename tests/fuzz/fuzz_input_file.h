// Shared by the fuzz targets whose readers take a path: one private temporary directory per
// process (removed at exit), and a helper that writes the fuzzer's bytes into a file there.
// Thread-safety: none; libFuzzer calls a target from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace zrt::fuzz {

// The process's scratch directory, made on first use under $TMPDIR (or /tmp).
inline const std::filesystem::path& scratchDirectory() {
  static const std::filesystem::path dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/zrt-fuzz-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) std::abort();  // nothing can be fuzzed without it
    std::filesystem::path p = templ;
    // A crash ends the process without exit hooks and leaves the directory for the crash's
    // reproduction; an ordinary end (time or run limit reached) removes it.
    static const std::filesystem::path removeAtExit = p;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removeAtExit, ec);
    });
    return p;
  }();
  return dir;
}

// Writes `size` bytes to <scratch>/<name>, replacing what an earlier input left; returns the path.
// The old file is unlinked rather than truncated: ext4 flushes a file truncated and rewritten
// at its close (auto_da_alloc), which made every run wait for the disk.
inline std::filesystem::path writeInput(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = scratchDirectory() / name;
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();  // a full /tmp: the run would test nothing
  return path;
}

}  // namespace zrt::fuzz
