#include "tools/gpu-bench/pinned_copies.h"

#include <algorithm>
#include <chrono>

#include "core/cuda/cuda_check.h"
#include "core/timing.h"

namespace zrt::gpubench {

PinnedCopies::PinnedCopies(Device& device, std::size_t bytes, std::size_t chunk)
    : device_(device), bytes_(bytes), chunk_(std::min(chunk, bytes)) {
  if (bytes == 0 || chunk == 0)
    ZRT_THROW(InvalidArgument, "pinned copies: --copy-bytes and --chunk must be > 0");
  deviceMemory_ = device.allocate(bytes, MemTag::Parameters);
  zrtHost_ = device.allocatePinned(bytes, MemTag::SwapBuffers);
  for (auto& s : streams_) s = device.createStream();
  ZRT_CHECK_CUDA(cudaMallocHost(&cudaHost_, bytes));
  ZRT_CHECK_CUDA(cudaStreamCreateWithFlags(&cudaStream_, cudaStreamNonBlocking));
  // Every page touched once before timing, so neither side pays for first-touch faults.
  device.memsetAsync(zrtHost_.data(), 1, bytes, *streams_[0]);
  device.memsetAsync(deviceMemory_.data(), 1, bytes, *streams_[0]);
  streams_[0]->synchronize();
  ZRT_CHECK_CUDA(cudaMemsetAsync(deviceMemory_.data(), 1, bytes, cudaStream_));
  ZRT_CHECK_CUDA(
      cudaMemcpyAsync(cudaHost_, deviceMemory_.data(), bytes, cudaMemcpyDeviceToHost, cudaStream_));
  ZRT_CHECK_CUDA(cudaStreamSynchronize(cudaStream_));
}

PinnedCopies::~PinnedCopies() {
  // Errors here have nothing left to report them to; the process is ending a benchmark.
  if (cudaStream_) cudaStreamDestroy(cudaStream_);
  if (cudaHost_) cudaFreeHost(cudaHost_);
}

double PinnedCopies::zrtCopy(bool toDevice) {
  const auto t0 = std::chrono::steady_clock::now();
  auto* dev = static_cast<char*>(deviceMemory_.data());
  auto* host = static_cast<char*>(zrtHost_.data());
  int k = 0;
  for (std::size_t at = 0; at < bytes_; at += chunk_, ++k) {
    const std::size_t n = std::min(chunk_, bytes_ - at);
    if (toDevice)
      device_.copyAsync(dev + at, host + at, n, *streams_[k % 2]);
    else
      device_.copyAsync(host + at, dev + at, n, *streams_[k % 2]);
  }
  for (auto& s : streams_) s->synchronize();
  return secondsSince(t0);
}

double PinnedCopies::cudaCopy(bool toDevice) {
  const auto t0 = std::chrono::steady_clock::now();
  if (toDevice) {
    ZRT_CHECK_CUDA(cudaMemcpyAsync(deviceMemory_.data(), cudaHost_, bytes_, cudaMemcpyHostToDevice,
                                   cudaStream_));
  } else {
    ZRT_CHECK_CUDA(cudaMemcpyAsync(cudaHost_, deviceMemory_.data(), bytes_, cudaMemcpyDeviceToHost,
                                   cudaStream_));
  }
  ZRT_CHECK_CUDA(cudaStreamSynchronize(cudaStream_));
  return secondsSince(t0);
}

PairedSeconds PinnedCopies::hostToDevice() { return {zrtCopy(true), cudaCopy(true)}; }
PairedSeconds PinnedCopies::deviceToHost() { return {zrtCopy(false), cudaCopy(false)}; }

}  // namespace zrt::gpubench
