// The Device interface: what the runtime needs from an accelerator. Memory (device and pinned
// host, every byte charged to the MemoryLedger), streams that run work in order, events to wait
// on, asynchronous copies and memsets, and host callbacks ordered with a stream's work.
// Two backends: HostDevice (a simulated accelerator in host memory, always built) and
// CudaDevice (real GPUs, when built with CUDA). makeDevice() picks one from a spec string.
// Thread-safety: a Device may be used from several threads; a Stream's methods are thread-safe,
// and its work runs in the order it was queued.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/elementwise.h"
#include "core/memory_ledger.h"
#include "core/wait.h"

namespace zrt {

enum class DeviceKind { Host, Cuda };

class Event;

class Stream {
 public:
  virtual ~Stream() = default;
  // Blocks until all work queued so far has finished; rethrows the first error a queued task
  // raised; throws TimeoutError after `timeout`.
  virtual void synchronize(std::chrono::milliseconds timeout = defaultWaitTimeout()) = 0;
  // Work queued on this stream after this call starts only once `event` has completed.
  virtual void waitEvent(Event& event) = 0;
  // The backend's handle (cudaStream_t for CUDA), for kernels and NCCL; nullptr on the host.
  virtual void* native() const = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  // Marks the point in `stream` reached by the work queued so far.
  virtual void record(Stream& stream) = 0;
  // True once the recorded work has finished (true for an event never recorded).
  virtual bool query() = 0;
  // Blocks the calling thread until query() would be true; TimeoutError after `timeout`.
  virtual void wait(std::chrono::milliseconds timeout = defaultWaitTimeout()) = 0;
};

class Device;

// A move-only owner of memory from a Device, charged to the ledger under its tag and place.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  MemPlace place() const { return place_; }
  MemTag tag() const { return tag_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset();

  // From now on, memory given back is taken off the ledger but not returned to its device's
  // allocator: the process is ending while something outside ZRT may still view the memory (the
  // Python package's exit, when a tensor still holding a graph views a closed engine's
  // parameters). The memory goes with the process. Irreversible; any thread.
  static void keepFreedMemory();

 private:
  friend class Device;
  DeviceMemory(Device* device, void* ptr, std::size_t bytes, MemTag tag, MemPlace place,
               bool inUse);

  Device* device_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  MemTag tag_ = MemTag::Other;
  MemPlace place_ = MemPlace::Device;
  bool inUse_ = true;  // charged to tag_ (false: reserved only, a caching allocator's block)
};

class Device {
 public:
  explicit Device(MemoryLedger& ledger) : ledger_(&ledger) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  // "host:0", "cuda:1".
  virtual std::string name() const = 0;
  // Bytes of device memory this device may hand out in all.
  virtual std::uint64_t capacity() const = 0;
  // True when host code may load and store this device's memory directly (the plain host
  // device); false for a GPU and for the strict host device ("host-strict"), whose device memory
  // faults on a host access.
  virtual bool hostReadsDeviceMemory() const { return kind() == DeviceKind::Host; }
  // Whether [p, p + bytes) lies inside one allocation of this device's memory (allocate,
  // reserve): what a backend that takes device memory only (NCCL) may be handed. Pinned and
  // pageable host memory are not. The default answers false: on `host`, device memory is
  // ordinary host memory and nothing tells it apart, so whoever asks stages it as host memory.
  virtual bool isDeviceMemory(const void* p, std::size_t bytes) const {
    (void)p;
    (void)bytes;
    return false;
  }

  // Device memory, charged to the ledger as reserved and in use under `tag`; throws OutOfMemory
  // (naming the tag, with the ledger table) when it does not fit. Each call with bytes > 0 is one
  // raw (backend) allocation: a cudaMalloc on CUDA.
  DeviceMemory allocate(std::size_t bytes, MemTag tag);
  // Device memory charged as reserved only: a block for the caching allocator, which charges the
  // bytes it hands out to their tags. `askedBy` is named in an OutOfMemory message (and by the
  // strict device in a fault).
  DeviceMemory reserve(std::size_t bytes, MemTag askedBy);
  // Raw device allocations made so far (allocate and reserve with bytes > 0).
  std::int64_t rawAllocations() const { return rawAllocations_.load(); }
  // Page-locked host memory the device can copy from asynchronously, 4096-byte aligned.
  DeviceMemory allocatePinned(std::size_t bytes, MemTag tag);

  virtual std::unique_ptr<Stream> createStream() = 0;
  virtual std::unique_ptr<Event> createEvent() = 0;

  // Queues a copy between any two of: device memory, pinned memory, pageable host memory.
  virtual void copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) = 0;
  virtual void memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) = 0;
  // Runs `fn` on a host thread after the work queued before it on `stream`; work queued after
  // waits for it. An exception from `fn` surfaces at the stream's next synchronize().
  virtual void hostCallback(Stream& stream, std::function<void()> fn) = 0;
  // Queues an element-wise kernel (core/elementwise.h) over device memory on `stream`, ordered
  // with its other work: a __global__ kernel on CUDA, the same function on a host stream's
  // thread elsewhere. Throws InvalidArgument for a launch that cannot run. This default runs it
  // on the stream's thread over the addresses given, for devices whose memory the host reads.
  virtual void launch(const ElementwiseArgs& args, Stream& stream);

  // A range of memory a host kernel (below) reads or writes.
  struct KernelBuffer {
    const void* data = nullptr;
    std::size_t bytes = 0;
  };
  using HostKernel = std::function<void(const std::vector<void*>& buffers)>;
  // Queues `kernel`, host code, on `stream` as a host backend's kernel: it runs on the stream's
  // thread after the work queued before it, and gets `buffers`' addresses back, in order, as
  // that thread may use them (the strict device's private aliases of its memory; the same
  // addresses on `host`; host memory as given). For computations written only as host code (the
  // reference trainer's layers): a device whose memory the host cannot reach at all (CUDA) throws
  // InvalidArgument naming `what`. An exception from `kernel` surfaces at the stream's next
  // synchronize().
  virtual void launchHost(std::string_view what, std::vector<KernelBuffer> buffers, HostKernel kernel,
                          Stream& stream);

  MemoryLedger& ledger() const { return *ledger_; }

 protected:
  virtual void* rawAllocate(std::size_t bytes) = 0;
  // What allocate() calls: a backend that wants to know the tag (to name it in a fault) overrides
  // this one.
  virtual void* rawAllocateTagged(std::size_t bytes, MemTag /*tag*/) { return rawAllocate(bytes); }
  virtual void rawFree(void* ptr, std::size_t bytes) noexcept = 0;
  virtual void* rawAllocatePinned(std::size_t bytes) = 0;
  virtual void rawFreePinned(void* ptr, std::size_t bytes) noexcept = 0;

  // The OutOfMemory message both backends use: what was asked, what is free, and the ledger.
  [[noreturn]] void throwOutOfMemory(std::size_t bytes, std::string_view what,
                                     std::uint64_t inUse, std::uint64_t limit) const;

 private:
  friend class DeviceMemory;
  void* rawDevice(std::size_t bytes, MemTag tag);
  MemoryLedger* ledger_;
  std::atomic<std::int64_t> rawAllocations_{0};
};

// Builds a device from a spec: "host", "host:<capacity>" (e.g. "host:8G"), "host-strict",
// "host-strict:<capacity>" (StrictDevice: device memory the host cannot touch), "cuda",
// "cuda:<n>". A host device's capacity defaults to ZRT_HOST_DEVICE_MEMORY, else 16 GiB.
std::unique_ptr<Device> makeDevice(const std::string& spec, MemoryLedger& ledger);

// True when this build has CUDA and a driver with at least one device answers.
bool cudaDeviceAvailable();
// The GPUs this process sees (0 without CUDA or a driver).
int visibleCudaDevices();

}  // namespace zrt
