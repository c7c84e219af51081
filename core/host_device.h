// HostDevice: a simulated accelerator in host memory with a capacity limit. Device memory is
// ordinary host memory counted against the capacity; going over it throws OutOfMemory with the
// ledger table, like a real OOM. Each Stream is a copy-engine thread that runs its queued work
// in order, so copies and callbacks really overlap with the caller. Pinned memory is locked with
// mlock, as page-locked staging memory is on a GPU host.
#pragma once

#include <atomic>

#include "core/device.h"

namespace zrt {

class HostDevice final : public Device {
 public:
  HostDevice(MemoryLedger& ledger, std::uint64_t capacityBytes);

  DeviceKind kind() const override { return DeviceKind::Host; }
  std::string name() const override { return "host:0"; }
  std::uint64_t capacity() const override { return capacity_; }
  std::uint64_t used() const { return used_.load(); }

  std::unique_ptr<Stream> createStream() override;
  std::unique_ptr<Event> createEvent() override;
  void copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) override;
  void memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) override;
  void hostCallback(Stream& stream, std::function<void()> fn) override;

 protected:
  void* rawAllocate(std::size_t bytes) override;
  void rawFree(void* ptr, std::size_t bytes) noexcept override;
  void* rawAllocatePinned(std::size_t bytes) override;
  void rawFreePinned(void* ptr, std::size_t bytes) noexcept override;

 private:
  std::uint64_t capacity_;
  std::atomic<std::uint64_t> used_{0};
};

}  // namespace zrt
