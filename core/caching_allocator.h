// CachingAllocator: device memory served from a cache of blocks, stream-ordered, as PyTorch's
// CUDA caching allocator. A raw allocation (cudaMalloc) synchronises a GPU and costs
// milliseconds; a loop that allocates and frees the same sizes every step (stage 3's gathered
// copies) should make raw allocations only in its first step.
// - Blocks are obtained with Device::reserve (charged to the ledger as reserved); what is handed
//   out is charged to its tag as in use, for the bytes asked. Reserved minus in use is the cache
//   and the slack of blocks larger than asked. Sizes are not rounded (unlike PyTorch's 512): a
//   device sized to the byte (a test's, a plan's) fits the same allocations with and without
//   the cache.
// - Stream ordering: memory allocated for work on stream S and freed goes back to the cache with
//   an event recorded on S at the free. Work on S may reuse the block at once (it is queued after
//   everything that used it); an allocation for another stream, or for none, reuses it only once
//   that event has completed. Memory allocated with no stream is ordered by the host: its owner
//   has waited for every use before freeing it, so anyone may reuse it at once.
// - Out of memory: the cached blocks are given back to the device (waiting, bounded, for their
//   events) and the allocation is tried once more; when it still fails, the OutOfMemory names the
//   tag that asked, what the cache held, and the ledger table.
// Thread-safety: every method may be called from any thread; a CachedMemory is owned by one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/device.h"

namespace zrt {

class CachingAllocator;

// A move-only handle on a cached block: given back to the cache (not to the device) on reset.
class CachedMemory {
 public:
  CachedMemory() = default;
  ~CachedMemory() { reset(); }
  CachedMemory(CachedMemory&& other) noexcept;
  CachedMemory& operator=(CachedMemory&& other) noexcept;
  CachedMemory(const CachedMemory&) = delete;
  CachedMemory& operator=(const CachedMemory&) = delete;

  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }  // as asked; the block may be larger
  MemTag tag() const { return tag_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset();

 private:
  friend class CachingAllocator;
  CachedMemory(CachingAllocator* owner, void* ptr, std::size_t bytes, MemTag tag)
      : owner_(owner), ptr_(ptr), bytes_(bytes), tag_(tag) {}
  CachingAllocator* owner_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  MemTag tag_ = MemTag::Other;
};

class CachingAllocator {
 public:
  explicit CachingAllocator(Device& device);
  // Gives the cache back to the device. Every CachedMemory must have been reset before.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `bytes` of device memory for `tag`, used by work queued on `stream` (nullptr: every
  // use is waited for by the host before the memory is freed). A cached block is taken when one
  // fits (the smallest, and no more than twice the size asked), else a raw allocation is made.
  CachedMemory allocate(std::size_t bytes, MemTag tag, Stream* stream = nullptr);

  // Makes sure the cache holds a block for each of `sizes` (bytes) at once, reserving from the
  // device those it lacks, without handing any out: a caller that knows what it will allocate
  // later (stage 3's coming steps) pays for the raw allocations now. The blocks are charged as
  // reserved only, `askedBy` names them in an OutOfMemory. Stops (without throwing) at the
  // first size the device cannot give; returns the bytes reserved.
  std::uint64_t warm(std::vector<std::size_t> sizes, MemTag askedBy);

  // Gives every cached block back to the device, waiting (bounded) for the events of blocks
  // freed on a stream. Blocks in use stay.
  void emptyCache();

  struct Stats {
    std::uint64_t reservedBytes = 0;  // blocks held, in use or cached
    std::uint64_t inUseBytes = 0;     // bytes asked by the allocations not yet freed
    std::uint64_t cachedBytes = 0;    // blocks held and free
    std::int64_t rawAllocations = 0;  // blocks obtained from the device
    std::int64_t cacheHits = 0;       // allocations served from the cache
  };
  Stats stats() const;
  Device& device() const { return device_; }

 private:
  friend class CachedMemory;
  struct Block {
    DeviceMemory memory;
    Stream* stream = nullptr;      // the stream its last user's work ran on, or none
    std::unique_ptr<Event> freed;  // recorded on `stream` at the free
    std::size_t asked = 0;
    MemTag tag = MemTag::Other;
  };
  void free(void* ptr) noexcept;
  void releaseCached(std::unique_lock<std::mutex>& lock);  // mu_ held
  // Hands `block` out to `stream` for `bytes` of `tag`, charged to the ledger. mu_ held.
  CachedMemory handOut(std::unique_ptr<Block> block, std::size_t bytes, MemTag tag, Stream* stream);

  Device& device_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, std::unique_ptr<Block>> cached_;  // by block size
  std::map<void*, std::unique_ptr<Block>> inUse_;
  std::vector<std::unique_ptr<Event>> events_;  // recycled events
  Stats stats_;
};

}  // namespace zrt
