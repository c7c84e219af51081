// The memory ledger: every byte the runtime allocates is charged to a tag (what the bytes are
// for) and a place (where they live). It keeps current and peak bytes per (tag, place) and per
// place, and prints a table like torch.cuda.memory_summary split by purpose.
// Device memory is counted twice over, as torch.cuda counts memory_allocated and
// memory_reserved: the tags hold the bytes *in use* (handed to a caller and not yet given back),
// and a separate counter holds the bytes *reserved* (obtained from the backend: cudaMalloc'ed, or
// taken from a host device's capacity). Reserved minus in use is what the caching allocator
// (core/caching_allocator.h) keeps for reuse, plus its rounding. The table prints the reserved
// row only once some device memory has been reserved.
// Thread-safe: charges and reads may come from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "core/units.h"

namespace zrt {

enum class MemTag : int {
  Parameters = 0,
  GatheredParameters,  // stage 3: whole copies gathered from the shards for a module's use
  Gradients,
  OptimizerState,
  CommBuckets,
  SwapBuffers,
  Activations,
  Other,
};
inline constexpr int kNumMemTags = 8;

enum class MemPlace : int {
  Device = 0,
  PinnedHost,
  Host,
  Nvme,
};
inline constexpr int kNumMemPlaces = 4;

std::string_view nameOf(MemTag tag);
std::string_view nameOf(MemPlace place);

class MemoryLedger {
 public:
  struct Counter {
    std::uint64_t current = 0;
    std::uint64_t peak = 0;
  };

  explicit MemoryLedger(std::string name = "zrt");
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // Charges (positive) or releases (via release) `bytes` to (tag, place).
  void charge(MemTag tag, MemPlace place, std::uint64_t bytes);
  // Releasing more than is charged is a bug in the caller and throws.
  void release(MemTag tag, MemPlace place, std::uint64_t bytes);

  Counter get(MemTag tag, MemPlace place) const;
  // Totals per place across tags; the peak is the peak of the sum, not the sum of peaks.
  Counter total(MemPlace place) const;

  // Device memory obtained from (reserve) or given back to (unreserve) the backend, whatever it is
  // used for; the tags say what the bytes in use are for.
  void reserve(std::uint64_t bytes);
  void unreserve(std::uint64_t bytes);
  Counter reserved() const;

  // Forgets peaks (they restart from the current values), as torch.cuda.reset_peak_memory_stats.
  void resetPeaks();

  // A table: one row per tag, current and peak for each place, and a total row.
  std::string table() const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  mutable std::mutex mu_;
  std::array<std::array<Counter, kNumMemPlaces>, kNumMemTags> cells_{};
  std::array<Counter, kNumMemPlaces> totals_{};
  Counter reserved_{};
};

// Move-only RAII charge: charges on construction, releases on destruction. Used for memory the
// ledger cannot see being allocated (swap file space, buffers owned by another library).
class LedgerCharge {
 public:
  LedgerCharge() = default;
  LedgerCharge(MemoryLedger& ledger, MemTag tag, MemPlace place, std::uint64_t bytes);
  ~LedgerCharge();
  LedgerCharge(LedgerCharge&& other) noexcept;
  LedgerCharge& operator=(LedgerCharge&& other) noexcept;
  LedgerCharge(const LedgerCharge&) = delete;
  LedgerCharge& operator=(const LedgerCharge&) = delete;

  std::uint64_t bytes() const { return bytes_; }
  void reset();

 private:
  MemoryLedger* ledger_ = nullptr;
  MemTag tag_ = MemTag::Other;
  MemPlace place_ = MemPlace::Host;
  std::uint64_t bytes_ = 0;
};

}  // namespace zrt
