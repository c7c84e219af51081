#include "core/caching_allocator.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace zrt {

CachedMemory::CachedMemory(CachedMemory&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      tag_(other.tag_) {}

CachedMemory& CachedMemory::operator=(CachedMemory&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    tag_ = other.tag_;
  }
  return *this;
}

void CachedMemory::reset() {
  if (owner_ && ptr_) owner_->free(ptr_);
  owner_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

CachingAllocator::CachingAllocator(Device& device) : device_(device) {}

CachingAllocator::~CachingAllocator() {
  std::unique_lock lock(mu_);
  if (!inUse_.empty())
    logError(detail::cat("caching allocator on ", device_.name(), " destroyed with ",
                         inUse_.size(), " block(s) still in use; they are given back now"));
  try {
    releaseCached(lock);
  } catch (const std::exception& e) {
    // A destructor must not throw: the blocks whose events did not complete are freed anyway.
    logError(e.what());
  }
  cached_.clear();
  for (auto& [ptr, block] : inUse_) device_.ledger().release(block->tag, MemPlace::Device, block->asked);
  inUse_.clear();
}

CachedMemory CachingAllocator::allocate(std::size_t bytes, MemTag tag, Stream* stream) {
  if (bytes == 0) return {};
  std::unique_lock lock(mu_);
  // The smallest cached block that fits and that this stream may use now: one last used on the
  // same stream (its work is queued ahead of ours), one ordered by the host, or one whose free
  // event has completed.
  for (auto it = cached_.lower_bound(bytes); it != cached_.end() && it->first <= 2 * bytes;
       ++it) {
    Block& b = *it->second;
    const bool ready = !b.freed || (stream && b.stream == stream) || b.freed->query();
    if (!ready) continue;
    const std::size_t size = it->first;
    std::unique_ptr<Block> block = std::move(it->second);
    cached_.erase(it);
    if (block->freed) events_.push_back(std::move(block->freed));
    stats_.cachedBytes -= size;
    ++stats_.cacheHits;
    return handOut(std::move(block), bytes, tag, stream);
  }
  DeviceMemory memory;
  try {
    memory = device_.reserve(bytes, tag);
  } catch (const OutOfMemory& first) {
    // As PyTorch: give the cache back to the device and try once more.
    const std::uint64_t cached = stats_.cachedBytes;
    releaseCached(lock);
    try {
      memory = device_.reserve(bytes, tag);
    } catch (const OutOfMemory& second) {
      ZRT_THROW(OutOfMemory, "caching allocator: '", nameOf(tag), "' asked for ",
                formatBytes(bytes), " of device memory on ", device_.name(), "; ",
                formatBytes(stats_.inUseBytes), " in use, ", formatBytes(stats_.reservedBytes),
                " reserved; the cache's ", formatBytes(cached),
                " were given back and the allocation retried, in vain: ", withoutRankPrefix(second.what()));
    }
  }
  auto block = std::make_unique<Block>();
  block->memory = std::move(memory);
  stats_.reservedBytes += bytes;
  ++stats_.rawAllocations;
  return handOut(std::move(block), bytes, tag, stream);
}

CachedMemory CachingAllocator::handOut(std::unique_ptr<Block> block, std::size_t bytes, MemTag tag,
                                       Stream* stream) {
  block->stream = stream;
  block->asked = bytes;
  block->tag = tag;
  void* p = block->memory.data();
  device_.ledger().charge(tag, MemPlace::Device, bytes);
  inUse_.emplace(p, std::move(block));
  stats_.inUseBytes += bytes;
  return CachedMemory(this, p, bytes, tag);
}

std::uint64_t CachingAllocator::warm(std::vector<std::size_t> sizes, MemTag askedBy) {
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  std::lock_guard lock(mu_);
  // The cached blocks each size would take (as allocate() picks them), claimed one size each.
  std::multiset<std::size_t> unclaimed;
  for (const auto& [size, block] : cached_) unclaimed.insert(size);
  std::uint64_t reserved = 0;
  for (const std::size_t bytes : sizes) {
    if (bytes == 0) continue;
    auto it = unclaimed.lower_bound(bytes);
    if (it != unclaimed.end() && *it <= 2 * bytes) {
      unclaimed.erase(it);
      continue;
    }
    auto block = std::make_unique<Block>();
    try {
      block->memory = device_.reserve(bytes, askedBy);
    } catch (const OutOfMemory&) {
      break;  // warming is a help, not a need: the allocation itself will say what is missing
    }
    block->tag = askedBy;
    ++stats_.rawAllocations;
    stats_.reservedBytes += bytes;
    stats_.cachedBytes += bytes;
    reserved += bytes;
    cached_.emplace(bytes, std::move(block));
  }
  return reserved;
}

void CachingAllocator::free(void* ptr) noexcept {
  try {
    std::lock_guard lock(mu_);
    auto it = inUse_.find(ptr);
    ZRT_ENFORCE(it != inUse_.end(), "caching allocator on ", device_.name(),
                " asked to free a block it did not hand out");
    std::unique_ptr<Block> block = std::move(it->second);
    inUse_.erase(it);
    device_.ledger().release(block->tag, MemPlace::Device, block->asked);
    stats_.inUseBytes -= block->asked;
    if (block->stream) {
      // Work queued on the stream may still read or write the block: another stream waits for
      // this event before reusing it.
      if (events_.empty()) {
        block->freed = device_.createEvent();
      } else {
        block->freed = std::move(events_.back());
        events_.pop_back();
      }
      block->freed->record(*block->stream);
    }
    const std::size_t size = block->memory.bytes();
    stats_.cachedBytes += size;
    cached_.emplace(size, std::move(block));
  } catch (const std::exception& e) {
    // Called from destructors: log the first error rather than throw.
    logError(e.what());
  }
}

void CachingAllocator::releaseCached(std::unique_lock<std::mutex>& lock) {
  (void)lock;
  for (auto it = cached_.begin(); it != cached_.end();) {
    Block& b = *it->second;
    if (b.freed) {
      try {
        b.freed->wait();
      } catch (const TimeoutError& e) {
        ZRT_THROW(TimeoutError, "caching allocator on ", device_.name(), ": waiting for the work on a ",
                  formatBytes(it->first), " block ('", nameOf(b.tag),
                  "') to finish before giving it back: ", e.what());
      }
    }
    stats_.reservedBytes -= it->first;
    stats_.cachedBytes -= it->first;
    it = cached_.erase(it);
  }
}

void CachingAllocator::emptyCache() {
  std::unique_lock lock(mu_);
  releaseCached(lock);
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace zrt
