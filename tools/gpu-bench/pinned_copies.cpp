#include "tools/gpu-bench/pinned_copies.h"

#include <algorithm>
#include <chrono>
#include <cstring>

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
  void* host = nullptr;
  ZRT_CHECK_CUDA(cudaMallocHost(&host, bytes));
  cudaHost_.reset(host);
  cudaStream_t stream = nullptr;
  ZRT_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaStream_.reset(stream);
  // Every page touched once before timing, so neither side pays for first-touch faults.
  std::memset(zrtHost_.data(), 1, bytes);
  std::memset(cudaHost_.get(), 1, bytes);
  device.memsetAsync(deviceMemory_.data(), 1, bytes, *streams_[0]);
  streams_[0]->synchronize();
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
    ZRT_CHECK_CUDA(cudaMemcpyAsync(deviceMemory_.data(), cudaHost_.get(), bytes_,
                                   cudaMemcpyHostToDevice, cudaStream_.get()));
  } else {
    ZRT_CHECK_CUDA(cudaMemcpyAsync(cudaHost_.get(), deviceMemory_.data(), bytes_,
                                   cudaMemcpyDeviceToHost, cudaStream_.get()));
  }
  ZRT_CHECK_CUDA(cudaStreamSynchronize(cudaStream_.get()));
  return secondsSince(t0);
}

void PinnedCopies::verify() {
  auto* host = static_cast<unsigned char*>(zrtHost_.data());
  std::memset(host, 0x5a, bytes_);
  zrtCopy(true);
  std::memset(host, 0, bytes_);
  zrtCopy(false);
  for (std::size_t i = 0; i < bytes_; i += 4096)
    if (host[i] != 0x5a || host[std::min(i + 4095, bytes_ - 1)] != 0x5a)
      ZRT_THROW(ExternalError, "pinned copies: byte ", i,
                " did not make the round trip through the device");
}

PairedSeconds PinnedCopies::hostToDevice() { return {zrtCopy(true), cudaCopy(true)}; }
PairedSeconds PinnedCopies::deviceToHost() { return {zrtCopy(false), cudaCopy(false)}; }

}  // namespace zrt::gpubench
