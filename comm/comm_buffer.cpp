#include "comm/comm_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace zrt::comm {
namespace {

struct HostOwner final : CommBuffer::Owner {
  void* p;
  explicit HostOwner(void* ptr) : p(ptr) {}
  ~HostOwner() override { std::free(p); }
};

struct DeviceOwner final : CommBuffer::Owner {
  DeviceMemory memory;
  explicit DeviceOwner(DeviceMemory m) : memory(std::move(m)) {}
};

}  // namespace

CommBuffer CommBuffer::onDevice(Device& device, std::size_t bytes) {
  DeviceMemory memory = device.allocate(bytes, MemTag::CommBuckets);
  if (bytes > 0) {
    auto stream = device.createStream();
    device.memsetAsync(memory.data(), 0, bytes, *stream);
    stream->synchronize();
  }
  void* data = memory.data();
  return CommBuffer(data, bytes, std::make_unique<DeviceOwner>(std::move(memory)));
}

CommBuffer CommBuffer::host(std::size_t bytes) {
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  return CommBuffer(p, bytes, std::make_unique<HostOwner>(p));
}

}  // namespace zrt::comm
