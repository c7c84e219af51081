#include "python/bindings/stream_order.h"

#include "core/build_config.h"
#include "core/error.h"

#if ZRT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/log.h"
#endif

namespace zrt::python {

#if ZRT_HAVE_CUDA

namespace {

// Records `event` on `from` and makes `to` wait for it. An event may be recorded again at once:
// cudaStreamWaitEvent waits for the recording current when it is called, not a later one.
void order(cudaEvent_t event, cudaStream_t from, cudaStream_t to) {
  ZRT_CHECK_CUDA(cudaEventRecord(event, from));
  ZRT_CHECK_CUDA(cudaStreamWaitEvent(to, event, 0));
}

cudaStream_t torchsStream(std::uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }
cudaStream_t enginesStream(Stream& s) { return static_cast<cudaStream_t>(s.native()); }

}  // namespace

// One event a direction: torch's point that the Engine waits for, and the Engine's that torch
// waits for. (The owner is a member class: a type of the anonymous namespace may not be a field
// of this one, which has external linkage.)
struct StreamOrder::Events {
  // A move-only owner of one CUDA event (no timing: recording one costs no clock read).
  class CudaEventOwner {
   public:
    CudaEventOwner() { ZRT_CHECK_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
    ~CudaEventOwner() {
      if (!event_) return;
      const cudaError_t err = cudaEventDestroy(event_);
      if (err != cudaSuccess) logError(detail::cat("cudaEventDestroy: ", cudaGetErrorString(err)));
    }
    CudaEventOwner(CudaEventOwner&& other) noexcept : event_(other.event_) {
      other.event_ = nullptr;
    }
    CudaEventOwner& operator=(CudaEventOwner&&) = delete;
    CudaEventOwner(const CudaEventOwner&) = delete;
    CudaEventOwner& operator=(const CudaEventOwner&) = delete;
    cudaEvent_t get() const { return event_; }

   private:
    cudaEvent_t event_ = nullptr;
  };

  CudaEventOwner torchDone;
  CudaEventOwner engineDone;
};

StreamOrder::StreamOrder(Device& device) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  if (!cuda) ZRT_THROW(InvalidArgument, "stream order: ", device.name(), " is not a CUDA device");
  // Events belong to the device current when they are made: the Engine's (which is torch's too,
  // as the binding checked).
  cuda->makeCurrent();
  events_ = std::make_unique<Events>();
}

void StreamOrder::engineAfterTorch(std::uintptr_t torchStream,
                                   std::initializer_list<Stream*> engine) {
  ZRT_CHECK_CUDA(cudaEventRecord(events_->torchDone.get(), torchsStream(torchStream)));
  for (Stream* s : engine)
    if (s) ZRT_CHECK_CUDA(cudaStreamWaitEvent(enginesStream(*s), events_->torchDone.get(), 0));
}

void StreamOrder::torchAfterEngine(Stream& engine, std::uintptr_t torchStream) {
  order(events_->engineDone.get(), enginesStream(engine), torchsStream(torchStream));
}

#else  // !ZRT_HAVE_CUDA

struct StreamOrder::Events {};

StreamOrder::StreamOrder(Device& device) {
  ZRT_THROW(InvalidArgument, "stream order on ", device.name(), ": this zrt build has no CUDA");
}

void StreamOrder::engineAfterTorch(std::uintptr_t, std::initializer_list<Stream*>) {}
void StreamOrder::torchAfterEngine(Stream&, std::uintptr_t) {}

#endif

StreamOrder::~StreamOrder() = default;

}  // namespace zrt::python
