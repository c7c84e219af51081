#include "offload/pinned_buffer_pool.h"

#include <cstdint>
#include <utility>

#include "offload/aligned_buffer.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace zrt::offload {

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

PinnedBufferPool::PinnedBufferPool(Device& device, std::size_t count, std::size_t bufferSize,
                                   std::optional<PinnedLimits> limits, bool registerWithUring)
    : count_(count), bufferSize_(bufferSize) {
  if (count == 0 || bufferSize == 0)
    ZRT_THROW(InvalidArgument, "pinned buffer pool: buffer_count (", count,
              ") and buffer_size (", bufferSize, ") must both be positive");
  std::uint64_t total = 0;
  if (bufferSize > SIZE_MAX - kPinnedBufferAlignment ||
      __builtin_mul_overflow(static_cast<std::uint64_t>(count),
                             alignUp(bufferSize, kPinnedBufferAlignment), &total)) {
    ZRT_THROW(InvalidArgument, "pinned buffer pool: buffer_count ", count, " x buffer_size ",
              bufferSize, " overflows 64 bits");
  }
  bufferSize_ = alignUp(bufferSize, kPinnedBufferAlignment);
  const bool memlock = device.kind() == DeviceKind::Host || registerWithUring;
  checkPinnedBudget(total,
                    zrt::detail::cat("pinned swap buffers (buffer_count ", count_,
                                     " x buffer_size ", formatBytes(bufferSize_), ")"),
                    limits ? *limits : readPinnedLimits(), memlock);
  memory_ = device.allocatePinned(total, MemTag::SwapBuffers);
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
