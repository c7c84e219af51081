// StrictDevice ("host-strict"): a simulated accelerator whose device memory the host cannot
// dereference. Each allocation is a memfd mapped twice: the address handed out is PROT_NONE, and
// a private read-write alias of the same pages is used only by the device's own stream work
// (copyAsync, memsetAsync, launch and launchHost translate device addresses to it). A host load
// or store of device memory faults; the fault handler writes
//   host touched device memory: allocation '<tag>' at offset N of M bytes (address 0x...)
// and aborts. A fault elsewhere goes to the handler that was there before (the default, or a
// sanitizer's). Host callbacks are host code: they may not touch device memory either.
// Streams and events are HostDevice's (a thread per stream, work in order); with a delay (the
// constructor's, else ZRT_STRICT_STREAM_DELAY_US microseconds) every copy, memset and callback
// first sleeps, so a missing wait shows up as a wrong result or a fault instead of passing by
// luck. Pinned host memory is ordinary mlock'ed host memory, readable by the host as on a GPU.
// Capacity and ledger charging are as HostDevice's.
// Thread-safety: as Device.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "core/device.h"
#include "core/host_device.h"

namespace zrt {

class StrictDevice final : public Device {
 public:
  // `streamDelay` unset: ZRT_STRICT_STREAM_DELAY_US, else none.
  StrictDevice(MemoryLedger& ledger, std::uint64_t capacityBytes,
               std::optional<std::chrono::microseconds> streamDelay = std::nullopt);
  ~StrictDevice() override;

  DeviceKind kind() const override { return DeviceKind::Host; }
  std::string name() const override { return "host-strict:0"; }
  std::uint64_t capacity() const override { return capacity_; }
  bool hostReadsDeviceMemory() const override { return false; }
  bool isDeviceMemory(const void* p, std::size_t bytes) const override;
  std::uint64_t used() const { return used_.load(); }
  std::chrono::microseconds streamDelay() const { return delay_; }

  std::unique_ptr<Stream> createStream() override;
  std::unique_ptr<Event> createEvent() override;
  void copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) override;
  void memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) override;
  void hostCallback(Stream& stream, std::function<void()> fn) override;
  // Runs the kernel on the stream's thread over the private aliases of its buffers.
  void launch(const ElementwiseArgs& args, Stream& stream) override;
  // Runs the kernel on the stream's thread over the private aliases of its buffers (each checked
  // against its allocation's end).
  void launchHost(std::string_view what, std::vector<KernelBuffer> buffers, HostKernel kernel,
                  Stream& stream) override;

 protected:
  void* rawAllocate(std::size_t bytes) override;
  void* rawAllocateTagged(std::size_t bytes, MemTag tag) override;
  void rawFree(void* ptr, std::size_t bytes) noexcept override;
  void* rawAllocatePinned(std::size_t bytes) override;
  void rawFreePinned(void* ptr, std::size_t bytes) noexcept override;

 private:
  class Mapping;
  // The alias address for [p, p + bytes) when p is device memory of this device (throws when the
  // range runs past the allocation's end); p itself otherwise.
  void* translate(const void* p, std::size_t bytes, const char* what) const;
  void delay(Stream& stream);

  HostDevice streams_;  // streams, events and the work they run; its memory is never used
  std::uint64_t capacity_;
  std::chrono::microseconds delay_;
  std::atomic<std::uint64_t> used_{0};
  mutable std::mutex mu_;
  std::map<std::uintptr_t, std::unique_ptr<Mapping>> mappings_;  // public start -> mapping
};

}  // namespace zrt
