#include "comm/device_queue.h"

#include <cstring>

#include "core/element_arithmetic.h"
#include "core/build_config.h"
#include "core/error.h"
#include "core/log.h"
#if ZRT_HAVE_CUDA
#include "comm/cuda/average_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#endif

namespace zrt::comm {
#if ZRT_HAVE_CUDA
namespace {

// A kernel launches on the calling thread's current GPU, which must be the stream's: copies
// find their device from the pointers, launches do not.
void launchOn(Device& device) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  ZRT_ENFORCE(cuda != nullptr, "device queue: ", device.name(), " is not a CUDA device");
  cuda->makeCurrent();
}

}  // namespace
#endif

DeviceQueue::DeviceQueue(Device* device)
    : device_(device), stream_(device ? device->createStream() : nullptr) {}

DeviceQueue::~DeviceQueue() {
  if (!stream_) return;
  try {
    stream_->synchronize();
  } catch (const std::exception& e) {
    logError(detail::cat("device queue: work queued by a bucketer failed while shutting down: ", e.what()));
  }
}

QueueBuffer DeviceQueue::allocate(std::size_t bytes) {
  QueueBuffer b;
  if (bytes == 0) return b;
  if (!device_) {
    b.host_.assign(bytes, 0);
    return b;
  }
  b.device_ = device_->allocate(bytes, MemTag::CommBuckets);
  device_->memsetAsync(b.device_.data(), 0, bytes, *stream_);
  return b;
}

void DeviceQueue::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (!device_) {
    std::memcpy(dst, src, bytes);
    return;
  }
  device_->copyAsync(dst, src, bytes, *stream_);
}

void DeviceQueue::divide(DType dtype, void* buf, std::size_t count, float divisor) {
  if (count == 0) return;
  if (!device_) return divideBy(dtype, buf, count, divisor);
  // A device whose memory the host cannot touch (host-strict) runs the kernel written once; the
  // plain host device keeps element_arithmetic's vectorised loop on the stream's thread.
  if (!device_->hostReadsDeviceMemory() && device_->kind() == DeviceKind::Host)
    return device_->launch(unaryArgs(ElementwiseOp::Divide, dtype, buf, dtype, buf, count, divisor),
                           *stream_);
  if (device_->kind() == DeviceKind::Host)
    return device_->hostCallback(*stream_, [=] { divideBy(dtype, buf, count, divisor); });
#if ZRT_HAVE_CUDA
  launchOn(*device_);
  ZRT_CHECK_CUDA(cuda::launchDivide(dtype, buf, count, divisor, static_cast<cudaStream_t>(stream_->native())));
#else
  ZRT_THROW(InvalidArgument, "device queue: ", device_->name(), " needs a build with CUDA");
#endif
}

void DeviceQueue::addDivided(DType dtype, void* dst, const void* src, std::size_t count, float divisor) {
  if (count == 0) return;
  if (!device_) return zrt::addDivided(dtype, dst, src, count, divisor);
  if (!device_->hostReadsDeviceMemory() && device_->kind() == DeviceKind::Host)
    return device_->launch(
        unaryArgs(ElementwiseOp::AddDivided, dtype, dst, dtype, src, count, divisor), *stream_);
  if (device_->kind() == DeviceKind::Host)
    return device_->hostCallback(*stream_, [=] { zrt::addDivided(dtype, dst, src, count, divisor); });
#if ZRT_HAVE_CUDA
  launchOn(*device_);
  ZRT_CHECK_CUDA(cuda::launchAddDivided(dtype, dst, src, count, divisor,
                                        static_cast<cudaStream_t>(stream_->native())));
#else
  ZRT_THROW(InvalidArgument, "device queue: ", device_->name(), " needs a build with CUDA");
#endif
}

void DeviceQueue::fence() {
  if (stream_) stream_->synchronize();
}

}  // namespace zrt::comm
