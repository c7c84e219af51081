// This machine's cache sizes, so the sweep can mark rows whose buffers stay in cache: such rows
// measure cache bandwidth, not memory's, and read as fractions of a different limit.
#pragma once

#include <cstdint>

namespace zrt::bench {

struct CacheSizes {
  std::uint64_t l2 = 0;  // per core; 0 = unknown
  std::uint64_t l3 = 0;  // shared by the cores of a socket; 0 = unknown
};

// From /sys/devices/system/cpu/cpu0/cache (Linux), else sysconf(_SC_LEVEL{2,3}_CACHE_SIZE).
// In a VM both report what the hypervisor presents, which other guests may share.
CacheSizes readCacheSizes();

// "L2" when one rank's bytes fit its L2, "L3" when all ranks' bytes fit the L3, else "mem".
const char* cacheLevel(const CacheSizes& caches, std::uint64_t bytesPerRank, int ranks);

}  // namespace zrt::bench
