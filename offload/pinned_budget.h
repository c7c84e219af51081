// The pinned-memory budget: how much host memory may still be page-locked, checked before
// anything is allocated, so a config asking too much fails with a message saying what was
// asked and what is allowed instead of an mlock assert or the OOM killer. Two limits apply:
// RLIMIT_MEMLOCK (for memory locked with mlock, and for io_uring registered buffers; a process
// with CAP_IPC_LOCK, such as root in most containers, is exempt) and free memory (MemAvailable;
// at most 90% of it may be pinned, so the kernel keeps room for page cache and everything else).
// Thread-safety: pure functions plus reads of /proc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zrt::offload {

struct PinnedLimits {
  std::optional<std::uint64_t> memlock;  // RLIMIT_MEMLOCK soft limit; nullopt = unlimited
  bool capIpcLock = false;               // CAP_IPC_LOCK in CapEff: RLIMIT_MEMLOCK does not bind
  std::uint64_t lockedNow = 0;           // VmLck: bytes this process has locked already
  std::uint64_t memAvailable = 0;        // MemAvailable from /proc/meminfo
};

// Reads the limits of this process now.
PinnedLimits readPinnedLimits();

// The fraction of MemAvailable that may be pinned.
inline constexpr double kPinnableFraction = 0.9;

struct PinnedAllowance {
  std::uint64_t bytes = 0;  // how much more may be pinned
  std::string reason;       // which limit decides, in words, with the numbers
};

// `countsAgainstMemlock`: the memory will be locked with mlock (the host device) or registered
// with io_uring; cudaHostAlloc'd memory is not charged to RLIMIT_MEMLOCK.
PinnedAllowance pinnedAllowance(const PinnedLimits& limits, bool countsAgainstMemlock);

// Throws OutOfMemory when `bytes` exceeds the allowance: "<what>: asked to pin X, but only Y
// may be pinned: <reason>; <how to fix>".
void checkPinnedBudget(std::uint64_t bytes, std::string_view what, const PinnedLimits& limits,
                       bool countsAgainstMemlock);

}  // namespace zrt::offload
