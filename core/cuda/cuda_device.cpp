#include "core/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <thread>

#include "core/cuda/cuda_check.h"
#include "core/cuda/elementwise_kernels.h"
#include "core/error.h"
#include "core/log.h"

namespace zrt {
namespace {

double seconds(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

// Polls `done` until it returns true or `timeout` passes. CUDA's own synchronize calls cannot
// time out, so a hung kernel would hang the caller forever; polling with a short sleep costs
// a few microseconds of latency and makes the wait bounded.
template <class Done>
bool pollUntil(Done done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto sleep = std::chrono::microseconds(1);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(sleep);
    if (sleep < std::chrono::microseconds(200)) sleep *= 2;
  }
  return true;
}

bool ready(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) return false;
  ZRT_THROW(ExternalError, "CUDA ", what, " failed: ", cudaGetErrorName(status), ": ",
            cudaGetErrorString(status));
}

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int ordinal) : ordinal_(ordinal) {
    ZRT_CHECK_CUDA(cudaSetDevice(ordinal_));
    ZRT_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() override {
    cudaError_t err = cudaStreamDestroy(stream_);
    if (err != cudaSuccess) logError(detail::cat("cudaStreamDestroy: ", cudaGetErrorString(err)));
  }
  void synchronize(std::chrono::milliseconds timeout) override {
    if (!pollUntil([&] { return ready(cudaStreamQuery(stream_), "cudaStreamQuery"); }, timeout)) {
      ZRT_THROW(TimeoutError, "cuda:", ordinal_, " stream synchronize: work not finished after ",
                seconds(timeout), " s");
    }
  }
  void waitEvent(Event& event) override;
  void* native() const override { return stream_; }
  cudaStream_t get() const { return stream_; }

 private:
  int ordinal_;
  cudaStream_t stream_ = nullptr;
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int ordinal) : ordinal_(ordinal) {
    ZRT_CHECK_CUDA(cudaSetDevice(ordinal_));
    ZRT_CHECK_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaEvent() override {
    cudaError_t err = cudaEventDestroy(event_);
    if (err != cudaSuccess) logError(detail::cat("cudaEventDestroy: ", cudaGetErrorString(err)));
  }
  void record(Stream& stream) override {
    ZRT_CHECK_CUDA(cudaEventRecord(event_, dynamic_cast<CudaStream&>(stream).get()));
  }
  bool query() override { return ready(cudaEventQuery(event_), "cudaEventQuery"); }
  void wait(std::chrono::milliseconds timeout) override {
    if (!pollUntil([&] { return query(); }, timeout)) {
      ZRT_THROW(TimeoutError, "cuda:", ordinal_, " event wait: recorded work not finished after ",
                seconds(timeout), " s");
    }
  }
  cudaEvent_t get() const { return event_; }

 private:
  int ordinal_;
  cudaEvent_t event_ = nullptr;
};

void CudaStream::waitEvent(Event& event) {
  ZRT_CHECK_CUDA(cudaStreamWaitEvent(stream_, dynamic_cast<CudaEvent&>(event).get(), 0));
}

cudaStream_t cudaStreamOf(Stream& stream) {
  auto* cs = dynamic_cast<CudaStream*>(&stream);
  ZRT_ENFORCE(cs != nullptr, "a stream from another device was passed to a CUDA device");
  return cs->get();
}

void CUDART_CB runHostCallback(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  // A host function must not call CUDA or throw into the driver; log instead.
  try {
    (*fn)();
  } catch (const std::exception& e) {
    logError(detail::cat("host callback on a CUDA stream failed: ", e.what()));
  }
}

}  // namespace

int cudaDeviceCount() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky "no driver" error so later calls start clean.
    return 0;
  }
  return count;
}

CudaDevice::CudaDevice(MemoryLedger& ledger, int ordinal) : Device(ledger), ordinal_(ordinal) {
  int count = cudaDeviceCount();
  if (ordinal < 0 || ordinal >= count) {
    ZRT_THROW(InvalidArgument, "cuda:", ordinal, " asked for, but ", count,
              " CUDA device(s) answer on this machine");
  }
  makeCurrent();
  std::size_t freeBytes = 0, totalBytes = 0;
  ZRT_CHECK_CUDA(cudaMemGetInfo(&freeBytes, &totalBytes));
  capacity_ = totalBytes;
}

std::string CudaDevice::name() const { return detail::cat("cuda:", ordinal_); }

void CudaDevice::makeCurrent() const { ZRT_CHECK_CUDA(cudaSetDevice(ordinal_)); }

std::unique_ptr<Stream> CudaDevice::createStream() {
  return std::make_unique<CudaStream>(ordinal_);
}
std::unique_ptr<Event> CudaDevice::createEvent() { return std::make_unique<CudaEvent>(ordinal_); }

void CudaDevice::copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) {
  ZRT_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamOf(stream)));
}

void CudaDevice::memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) {
  ZRT_CHECK_CUDA(cudaMemsetAsync(dst, value, bytes, cudaStreamOf(stream)));
}

void CudaDevice::launch(const ElementwiseArgs& args, Stream& stream) {
  checkElementwise(args);
  if (args.count == 0) return;
  makeCurrent();
  ZRT_CHECK_CUDA(cuda::launchElementwise(args, cudaStreamOf(stream)));
}

void CudaDevice::hostCallback(Stream& stream, std::function<void()> fn) {
  auto* heap = new std::function<void()>(std::move(fn));
  cudaError_t err = cudaLaunchHostFunc(cudaStreamOf(stream), runHostCallback, heap);
  if (err != cudaSuccess) {
    delete heap;
    ZRT_CHECK_CUDA(err);
  }
}

bool CudaDevice::isDeviceMemory(const void* p, std::size_t bytes) const {
  // The first and the last byte: the runtime API does not tell an allocation's extent.
  auto onDevice = [](const void* at) {
    cudaPointerAttributes a{};
    ZRT_CHECK_CUDA(cudaPointerGetAttributes(&a, at));
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  };
  if (p == nullptr) return false;
  return onDevice(p) && (bytes <= 1 || onDevice(static_cast<const char*>(p) + bytes - 1));
}

void* CudaDevice::rawAllocate(std::size_t bytes) {
  makeCurrent();
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t freeBytes = 0, totalBytes = 0;
    cudaMemGetInfo(&freeBytes, &totalBytes);
    throwOutOfMemory(bytes, "device", totalBytes - freeBytes, totalBytes);
  }
  ZRT_CHECK_CUDA(err);
  return p;
}

void CudaDevice::rawFree(void* ptr, std::size_t) noexcept {
  cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess) logError(detail::cat("cudaFree: ", cudaGetErrorString(err)));
}

void* CudaDevice::rawAllocatePinned(std::size_t bytes) {
  makeCurrent();
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ZRT_THROW(OutOfMemory, name(), ": cudaHostAlloc of ", bytes,
              " bytes of pinned host memory failed\n", ledger().table());
  }
  ZRT_CHECK_CUDA(err);
  return p;
}

void CudaDevice::rawFreePinned(void* ptr, std::size_t) noexcept {
  cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess) logError(detail::cat("cudaFreeHost: ", cudaGetErrorString(err)));
}

}  // namespace zrt
