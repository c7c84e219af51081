#include "offload/pinned_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/units.h"

namespace zrt::offload {
namespace {

constexpr int kCapIpcLock = 14;  // linux/capability.h

// The value of "Key:   N kB" in a /proc file, in bytes; nullopt when absent.
std::optional<std::uint64_t> procKiB(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() &&
        line[key.size()] == ':') {
      std::istringstream v(line.substr(key.size() + 1));
      std::uint64_t kib = 0;
      if (v >> kib) return kib * 1024;
    }
  }
  return std::nullopt;
}

bool hasCapIpcLock() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      const std::uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> kCapIpcLock) & 1u;
    }
  }
  return false;
}

}  // namespace

PinnedLimits readPinnedLimits() {
  PinnedLimits l;
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) l.memlock = rl.rlim_cur;
  l.capIpcLock = hasCapIpcLock();
  l.lockedNow = procKiB("/proc/self/status", "VmLck").value_or(0);
  l.memAvailable = procKiB("/proc/meminfo", "MemAvailable").value_or(0);
  return l;
}

PinnedAllowance pinnedAllowance(const PinnedLimits& limits, bool countsAgainstMemlock) {
  const auto byMemory = static_cast<std::uint64_t>(
      static_cast<double>(limits.memAvailable) * kPinnableFraction);
  PinnedAllowance a{byMemory,
                    zrt::detail::cat("free memory (MemAvailable) is ",
                                     formatBytes(limits.memAvailable), ", and at most ",
                                     static_cast<int>(kPinnableFraction * 100),
                                     "% of it is pinned so the kernel keeps room")};
  if (countsAgainstMemlock && limits.memlock && !limits.capIpcLock) {
    const std::uint64_t room =
        *limits.memlock > limits.lockedNow ? *limits.memlock - limits.lockedNow : 0;
    if (room < a.bytes) {
      a = {room, zrt::detail::cat("RLIMIT_MEMLOCK is ", formatBytes(*limits.memlock), " with ",
                                  formatBytes(limits.lockedNow),
                                  " already locked by this process")};
    }
  }
  return a;
}

void checkPinnedBudget(std::uint64_t bytes, std::string_view what, const PinnedLimits& limits,
                       bool countsAgainstMemlock) {
  const PinnedAllowance a = pinnedAllowance(limits, countsAgainstMemlock);
  if (bytes <= a.bytes) return;
  const bool memlockDecides = a.reason.rfind("RLIMIT_MEMLOCK", 0) == 0;
  ZRT_THROW(OutOfMemory, what, ": asked to pin ", formatBytes(bytes), " (", bytes,
            " bytes) of host memory, but only ", formatBytes(a.bytes), " may be pinned: ",
            a.reason, "; ",
            memlockDecides
                ? "raise the limit (`ulimit -l unlimited`, /etc/security/limits.conf, or "
                  "docker --ulimit memlock=-1) or lower buffer_count / buffer_size"
                : "lower buffer_count / buffer_size or free host memory");
}

}  // namespace zrt::offload
