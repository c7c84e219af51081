// PinnedBufferPool: buffer_count staging buffers of buffer_size bytes in page-locked host
// memory, allocated once through the Device (cudaHostAlloc on GPUs, mlock on the host device)
// and charged to the ledger as MemTag::SwapBuffers. The pinned-memory budget is checked before
// allocating. Buffers are lent out as move-only leases; iovecs() gives the regions to register
// with the OffloadEngine as fixed buffers. On the host device, a pool of at least one
// transparent huge page is aligned to and padded to whole huge pages and moved into them (fewer
// DMA segments per transfer): it pins up to two huge pages (4 MiB on x86-64) more than
// count x size, charged to the ledger like the rest (pinnedPoolBytes, which zrt-plan counts by).
// Thread-safety: acquire/tryAcquire/available and lease destruction from any thread. The pool
// must outlive its leases.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "offload/pinned_budget.h"
#include "core/device.h"
#include "core/wait.h"

namespace zrt::offload {

// Every buffer's size is rounded up to this many bytes (O_DIRECT alignment on any drive with
// sectors up to 4 KiB); zrt-plan's swap-buffer estimate uses it too.
inline constexpr std::size_t kPinnedBufferAlignment = 4096;

// The size of a transparent huge page on this machine (2 MiB on x86-64), from
// /sys/kernel/mm/transparent_hugepage/hpage_pmd_size; 2 MiB when it cannot be read.
std::size_t transparentHugePageBytes();

// The bytes a pool of `count` buffers of `bufferSize` allocates and charges: count x bufferSize
// rounded up to kPinnedBufferAlignment, and, when `hugePage` is not 0 (a host-device pool that
// moves into huge pages of that size) and that total is at least one huge page, rounded up to
// whole huge pages plus the huge page less 4 KiB that aligning the start may take. Throws
// InvalidArgument when the size overflows 64 bits.
std::uint64_t pinnedPoolBytes(std::size_t count, std::size_t bufferSize, std::size_t hugePage);

class PinnedBufferPool {
 public:
  class Lease {
   public:
    Lease() = default;
    ~Lease() { release(); }
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    std::byte* data() const { return data_; }
    std::size_t size() const { return size_; }
    std::size_t index() const { return index_; }
    explicit operator bool() const { return pool_ != nullptr; }
    void release();

   private:
    friend class PinnedBufferPool;
    Lease(PinnedBufferPool* pool, std::size_t index, std::byte* data, std::size_t size)
        : pool_(pool), index_(index), data_(data), size_(size) {}
    PinnedBufferPool* pool_ = nullptr;
    std::size_t index_ = 0;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
  };

  // `bufferSize` is rounded up to a multiple of kPinnedBufferAlignment. `limits`: the budget to check against
  // (read from the system when absent; tests pass their own). `registerWithUring`: the buffers
  // will be registered with io_uring, which charges them to RLIMIT_MEMLOCK on any device.
  // `hugePages`: on the host device, move the buffers into transparent huge pages where the
  // kernel can (fewer DMA segments per transfer; see preferHugePages in the .cpp).
  PinnedBufferPool(Device& device, std::size_t count, std::size_t bufferSize,
                   std::optional<PinnedLimits> limits = std::nullopt,
                   bool registerWithUring = true, bool hugePages = true);
  ~PinnedBufferPool();
  PinnedBufferPool(const PinnedBufferPool&) = delete;
  PinnedBufferPool& operator=(const PinnedBufferPool&) = delete;

  // Waits for a free buffer; TimeoutError (saying how many are lent out) after `timeout`.
  Lease acquire(std::chrono::milliseconds timeout = defaultWaitTimeout());
  std::optional<Lease> tryAcquire();

  std::size_t count() const { return count_; }
  std::size_t bufferSize() const { return bufferSize_; }
  std::size_t available() const;
  std::byte* buffer(std::size_t i) const { return base_ + i * bufferSize_; }
  std::vector<iovec> iovecs() const;

 private:
  void giveBack(std::size_t index);

  std::size_t count_;
  std::size_t bufferSize_;
  DeviceMemory memory_;
  std::byte* base_ = nullptr;  // the first buffer: memory_, or its first huge-page boundary
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::size_t> free_;
};

}  // namespace zrt::offload
