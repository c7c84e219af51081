// DeviceQueue: the device work of a bucketer, in order on one stream of a Device: copies between
// the caller's memory (gradients, the partition manager's buffers) and the communicator's, the
// averaging kernels, and the fence a collective needs before it reads what was queued. A bucketer
// never touches the caller's memory with the CPU itself, so it runs unchanged on the `cuda`
// device and through the staged communicator.
// Without a Device the caller's memory is plain host memory and every call runs at once on the
// calling thread (tools and tests that have no device). On the host device the kernels run on
// the stream's thread (a host callback) with the very functions of core/element_arithmetic.h, so the
// results are the same bits; on `cuda` they are the kernels of comm/cuda/average_kernels.h.
// Thread-safety: one thread drives a queue.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace zrt::comm {

// Memory of the bucketer's own on the caller's side: device memory when there is a Device (the
// device's ledger charges it, as CommBuckets on the device), host heap memory otherwise.
class QueueBuffer {
 public:
  QueueBuffer() = default;
  char* data() { return device_ ? device_.as<char>() : host_.data(); }
  const char* data() const { return device_ ? device_.as<char>() : host_.data(); }
  std::size_t bytes() const { return device_ ? device_.bytes() : host_.size(); }

 private:
  friend class DeviceQueue;
  DeviceMemory device_;
  std::vector<char> host_;
};

class DeviceQueue {
 public:
  explicit DeviceQueue(Device* device);  // null: host memory, no stream
  ~DeviceQueue();                        // waits for the work queued (it references buffers)
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  Device* device() const { return device_; }
  // `bytes` of zeroed memory for the bucketer's own use (see QueueBuffer).
  QueueBuffer allocate(std::size_t bytes);

  // Between any two of: the device's memory, pinned or pageable host memory.
  void copy(void* dst, const void* src, std::size_t bytes);
  // core/element_arithmetic.h's divideBy and addDivided, on the device's memory.
  void divide(DType dtype, void* buf, std::size_t count, float divisor);
  void addDivided(DType dtype, void* dst, const void* src, std::size_t count, float divisor);
  // Blocks until every call so far has finished; rethrows the first error of the queued work.
  void fence();

 private:
  Device* device_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace zrt::comm
