#include "offload/pinned_buffer_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <utility>

#include "offload/aligned_buffer.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; C libraries older than the kernel lack the name
#endif

namespace zrt::offload {

// 2 MiB on x86-64; 512 MiB on arm64 with 64 KiB pages.
std::size_t transparentHugePageBytes() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
  std::size_t n = 0;
  if (in >> n && n > 0) return n;
  return std::size_t{2} << 20;
}

namespace {

// Backs the pool's host memory with transparent huge pages where the kernel can. A transfer
// between a file and 4 KiB pages scattered in physical memory takes one DMA segment per page:
// a virtio disk limited to 254 segments splits each 1 MiB transfer in two and may hold only
// one such request in its ring at a time, an NVMe drive reads a PRP entry per page, an IOMMU
// maps each. io_uring registers a buffer made of huge pages as one segment per huge page, so a
// 1 MiB transfer is one segment. On the build VM, with only part of zrt-io's pool in huge pages,
// its 1 MiB reads at depth 16 went from 1.06-1.36 GB/s to 1.54-1.91 (docs/offload.md).
// MADV_COLLAPSE (Linux 6.1) moves the pages, already faulted in and locked, into huge pages
// now (about 30 ms for 48 MiB here); best effort: without it, with THP set to never, or with
// no huge page free, the pool keeps 4 KiB pages and works as before. Host memory only: GPU
// drivers map and pin their own.
void preferHugePages(std::byte* p, std::size_t bytes) {
  const std::size_t huge = transparentHugePageBytes();
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t begin = alignUp(addr, huge);
  const std::uintptr_t end = alignDown(addr + bytes, huge);
  if (end <= begin) return;  // smaller than one aligned huge page
  void* start = reinterpret_cast<void*>(begin);
  const std::size_t len = end - begin;
  if (::madvise(start, len, MADV_HUGEPAGE) != 0 || ::madvise(start, len, MADV_COLLAPSE) != 0) {
    const int err = errno;
    ZRT_INFO("pinned swap buffers stay in base pages (", formatBytes(len),
             " not collapsed into transparent huge pages: ", std::strerror(err), ")");
  }
}

}  // namespace

PinnedBufferPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      index_(other.index_),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PinnedBufferPool::Lease& PinnedBufferPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::exchange(other.pool_, nullptr);
    index_ = other.index_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PinnedBufferPool::Lease::release() {
  if (pool_ == nullptr) return;
  std::exchange(pool_, nullptr)->giveBack(index_);
  data_ = nullptr;
  size_ = 0;
}

namespace {

// The pool's memory: count buffers of bufferSize rounded to kPinnedBufferAlignment (`span` of
// them), and, for a pool moved into huge pages of `huge` bytes (0: not) of at least one, the
// buffers start on a huge-page boundary and the pool is padded to whole huge pages, so every
// buffer lies in pages that can be collapsed (io_uring coalesces a registered buffer only when
// all of its pages are huge). The padding, under two huge pages, is pinned and charged like the
// rest.
struct PoolLayout {
  std::size_t huge = 0;  // the huge-page alignment in use, 0 when none
  std::uint64_t span = 0;   // from the first buffer to the end of the padding
  std::uint64_t bytes = 0;  // allocated
};

PoolLayout poolLayout(std::size_t count, std::size_t bufferSize, std::size_t huge) {
  std::uint64_t total = 0;
  if (bufferSize > SIZE_MAX - kPinnedBufferAlignment ||
      __builtin_mul_overflow(static_cast<std::uint64_t>(count),
                             alignUp(bufferSize, kPinnedBufferAlignment), &total)) {
    ZRT_THROW(InvalidArgument, "pinned buffer pool: buffer_count ", count, " x buffer_size ",
              bufferSize, " overflows 64 bits");
  }
  PoolLayout l;
  const bool aligned = huge != 0 && total >= huge && total <= SIZE_MAX / 2;
  l.huge = aligned ? huge : 0;
  l.span = aligned ? alignUp(total, huge) : total;
  l.bytes = aligned ? l.span + huge - kPinnedBufferAlignment : total;
  return l;
}

}  // namespace

std::uint64_t pinnedPoolBytes(std::size_t count, std::size_t bufferSize, std::size_t hugePage) {
  return poolLayout(count, bufferSize, hugePage).bytes;
}

PinnedBufferPool::PinnedBufferPool(Device& device, std::size_t count, std::size_t bufferSize,
                                   std::optional<PinnedLimits> limits, bool registerWithUring,
                                   bool hugePages)
    : count_(count), bufferSize_(bufferSize) {
  if (count == 0 || bufferSize == 0)
    ZRT_THROW(InvalidArgument, "pinned buffer pool: buffer_count (", count,
              ") and buffer_size (", bufferSize, ") must both be positive");
  const PoolLayout layout =
      poolLayout(count, bufferSize, hugePages && device.kind() == DeviceKind::Host ? transparentHugePageBytes() : 0);
  const std::uint64_t bytes = layout.bytes;
  bufferSize_ = alignUp(bufferSize, kPinnedBufferAlignment);
  const bool memlock = device.kind() == DeviceKind::Host || registerWithUring;
  checkPinnedBudget(bytes,
                    zrt::detail::cat("pinned swap buffers (buffer_count ", count_,
                                     " x buffer_size ", formatBytes(bufferSize_), ")"),
                    limits ? *limits : readPinnedLimits(), memlock);
  memory_ = device.allocatePinned(bytes, MemTag::SwapBuffers);
  base_ = memory_.as<std::byte>();
  if (layout.huge) {
    // The device's pinned memory is page-aligned, so the next huge-page boundary is at most
    // huge - 4 KiB in, and the aligned span still ends inside the allocation.
    base_ += alignUp(reinterpret_cast<std::uintptr_t>(base_), layout.huge) -
             reinterpret_cast<std::uintptr_t>(base_);
    preferHugePages(base_, layout.span);
  }
  free_.reserve(count_);
  for (std::size_t i = count_; i-- > 0;) free_.push_back(i);
}

PinnedBufferPool::~PinnedBufferPool() {
  std::lock_guard lock(mu_);
  if (free_.size() != count_) {
    logError(zrt::detail::cat("pinned buffer pool destroyed with ", count_ - free_.size(),
                              " of ", count_, " buffers still lent out"));
  }
}

PinnedBufferPool::Lease PinnedBufferPool::acquire(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  // Waits for another user to give a buffer back.
  if (!cv_.wait_for(lock, timeout, [&] { return !free_.empty(); })) {
    ZRT_THROW(TimeoutError, "waited ", static_cast<double>(timeout.count()) / 1000.0,
              " s for a free pinned buffer: all ", count_, " buffers of ",
              formatBytes(bufferSize_), " are lent out (raise buffer_count?)");
  }
  const std::size_t i = free_.back();
  free_.pop_back();
  return Lease(this, i, buffer(i), bufferSize_);
}

std::optional<PinnedBufferPool::Lease> PinnedBufferPool::tryAcquire() {
  std::lock_guard lock(mu_);
  if (free_.empty()) return std::nullopt;
  const std::size_t i = free_.back();
  free_.pop_back();
  return Lease(this, i, buffer(i), bufferSize_);
}

std::size_t PinnedBufferPool::available() const {
  std::lock_guard lock(mu_);
  return free_.size();
}

std::vector<iovec> PinnedBufferPool::iovecs() const {
  std::vector<iovec> out(count_);
  for (std::size_t i = 0; i < count_; ++i) out[i] = {buffer(i), bufferSize_};
  return out;
}

void PinnedBufferPool::giveBack(std::size_t index) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(index);
  }
  cv_.notify_one();
}

}  // namespace zrt::offload
