// CudaDevice: the Device interface over the CUDA runtime. cudaMalloc for device memory,
// cudaHostAlloc for pinned memory, non-blocking streams, timing-free events, and
// cudaLaunchHostFunc for host callbacks. Waits poll with a timeout so a stuck kernel or copy is
// reported instead of hanging.
#pragma once

#include "core/device.h"

namespace zrt {

// Number of CUDA devices a driver reports; 0 when no driver or device answers (never throws).
int cudaDeviceCount() noexcept;

class CudaDevice final : public Device {
 public:
  CudaDevice(MemoryLedger& ledger, int ordinal);

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override;
  std::uint64_t capacity() const override { return capacity_; }
  int ordinal() const { return ordinal_; }

  // cudaPointerGetAttributes: device (or managed) memory of any GPU this process can reach.
  bool isDeviceMemory(const void* p, std::size_t bytes) const override;
  std::unique_ptr<Stream> createStream() override;
  std::unique_ptr<Event> createEvent() override;
  void copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) override;
  void memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) override;
  void hostCallback(Stream& stream, std::function<void()> fn) override;
  // A __global__ kernel (core/cuda/elementwise_kernels.cu).
  void launch(const ElementwiseArgs& args, Stream& stream) override;

  // Makes this device current on the calling thread (CUDA's device selection is per thread).
  void makeCurrent() const;

 protected:
  void* rawAllocate(std::size_t bytes) override;
  void rawFree(void* ptr, std::size_t bytes) noexcept override;
  void* rawAllocatePinned(std::size_t bytes) override;
  void rawFreePinned(void* ptr, std::size_t bytes) noexcept override;

 private:
  int ordinal_;
  std::uint64_t capacity_ = 0;
};

}  // namespace zrt
