// GuardedDevice: a test device whose device memory the CPU cannot touch. Every allocation is its
// own mapping with no access; only while the device itself runs a queued operation (a copy, a
// memset, a host callback) are that device's mappings opened, under one process-wide lock. Code
// that is meant to reach device memory only through a Device (the bucketers, the staged
// communicator) is run on it: a direct load or store from the CPU faults, and the fault handler
// names the address and ends the process with kGuardViolationExit. A fault anywhere else goes to
// the handler that was there before (the default, or a sanitizer's).
// The guard can miss an access only while the same device is running an operation on another
// thread (its mappings are open then); it never reports one that did not happen.
// Operations run at once, in order, on the calling thread, so a stream is always synchronised:
// this device checks where memory is touched, not the ordering of asynchronous work (the tests
// that use it run the same code on HostDevice, whose streams are threads, for that). A host
// callback's exception is kept and rethrown by its stream's next synchronize(), as the Device
// contract says. It reports itself as a host-kind device (kernels come as host callbacks).
// Thread-safety: as Device; operations of all GuardedDevices are serialised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/device.h"

namespace zrt::test {

inline constexpr int kGuardViolationExit = 86;

class GuardedDevice final : public Device {
 public:
  explicit GuardedDevice(MemoryLedger& ledger);
  ~GuardedDevice() override;

  DeviceKind kind() const override { return DeviceKind::Host; }
  std::string name() const override { return "guarded:0"; }
  std::uint64_t capacity() const override { return std::uint64_t{1} << 40; }

  std::unique_ptr<Stream> createStream() override;
  std::unique_ptr<Event> createEvent() override;
  void copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) override;
  void memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) override;
  void hostCallback(Stream& stream, std::function<void()> fn) override;

  // Copies between host memory and this device's memory, for a test's set-up and checks.
  void upload(void* dst, const void* src, std::size_t bytes);
  void download(void* dst, const void* src, std::size_t bytes);
  // Operations this device has run (a test checks that the code under test used it at all).
  std::uint64_t operations() const;

 protected:
  void* rawAllocate(std::size_t bytes) override;
  void rawFree(void* ptr, std::size_t bytes) noexcept override;
  void* rawAllocatePinned(std::size_t bytes) override;
  void rawFreePinned(void* ptr, std::size_t bytes) noexcept override;

 private:
  void run(const std::function<void()>& op);  // with this device's mappings open

  std::map<std::uintptr_t, std::size_t> mappings_;  // start -> bytes; under the global lock
  std::uint64_t operations_ = 0;                    // under the global lock
};

}  // namespace zrt::test
