// StreamOrder: how torch's work and the Engine's are ordered on a GPU without a device-wide
// synchronisation. torch's current stream arrives as its handle (the int of
// torch.cuda.current_stream(device).cuda_stream: no torch C++ API is linked) and waits for, or is
// waited on by, an Engine stream through CUDA events this object owns. Used where torch hands the
// Engine its gradients and where torch reads the Engine's parameters after a gather or a step.
// Thread-safety: one thread (the training loop's) uses a StreamOrder.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>

#include "core/device.h"

namespace zrt::python {

class StreamOrder {
 public:
  // Two events on `device`, which must be a CUDA device; InvalidArgument on a build without CUDA.
  explicit StreamOrder(Device& device);
  ~StreamOrder();
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // Work queued on each of `engine` (null ones skipped) from now on starts after the work queued
  // so far on `torchStream`.
  void engineAfterTorch(std::uintptr_t torchStream, std::initializer_list<Stream*> engine);
  // Work queued on `torchStream` from now on starts after the work queued so far on `engine`.
  void torchAfterEngine(Stream& engine, std::uintptr_t torchStream);

 private:
  struct Events;
  std::unique_ptr<Events> events_;
};

}  // namespace zrt::python
