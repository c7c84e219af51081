#include "tools/comm-bench/cache_info.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace zrt::bench {
namespace {

// "2048K", "32M" (the kernel's cache size format) in bytes; 0 when unreadable.
std::uint64_t parseSysSize(const std::string& text) {
  std::size_t used = 0;
  std::uint64_t v = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const char unit = used < text.size() ? text[used] : ' ';
  if (unit == 'K') return v << 10;
  if (unit == 'M') return v << 20;
  if (unit == 'G') return v << 30;
  return v;
}

std::uint64_t fromSys(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream levelFile(dir + "level"), typeFile(dir + "type"), sizeFile(dir + "size");
    int l = 0;
    std::string type, size;
    if (!(levelFile >> l) || !(typeFile >> type) || !(sizeFile >> size)) continue;
    if (l == level && type != "Instruction") return parseSysSize(size);
  }
  return 0;
}

std::uint64_t fromSysconf(int name) {
  const long v = ::sysconf(name);
  return v > 0 ? static_cast<std::uint64_t>(v) : 0;
}

}  // namespace

CacheSizes readCacheSizes() {
  CacheSizes c;
  c.l2 = fromSys(2);
  c.l3 = fromSys(3);
  if (c.l2 == 0) c.l2 = fromSysconf(_SC_LEVEL2_CACHE_SIZE);
  if (c.l3 == 0) c.l3 = fromSysconf(_SC_LEVEL3_CACHE_SIZE);
  return c;
}

const char* cacheLevel(const CacheSizes& caches, std::uint64_t bytesPerRank, int ranks) {
  const std::uint64_t all = bytesPerRank * static_cast<std::uint64_t>(ranks);
  if (caches.l2 && bytesPerRank <= caches.l2 && (!caches.l3 || all <= caches.l3)) return "L2";
  if (caches.l3 && all <= caches.l3) return "L3";
  return "mem";
}

}  // namespace zrt::bench
