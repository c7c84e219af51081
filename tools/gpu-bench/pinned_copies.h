// ZRT's transfers between device memory and pinned host memory, against the CUDA runtime at its
// best: the same bytes moved once as ZRT's offload moves them (host memory from
// Device::allocatePinned, pieces of `chunk` bytes through Device::copyAsync on two of the
// Device's streams taken in turn, as the swapper's buffers are) and once as one cudaMemcpyAsync
// of the whole range from cudaMallocHost memory on a stream of its own. The device memory is the
// same for both. One thread at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

#include "core/device.h"

namespace zrt::gpubench {

// Seconds each way took, for one direction.
struct PairedSeconds {
  double zrt = 0;
  double cuda = 0;
};

class PinnedCopies {
 public:
  PinnedCopies(Device& device, std::size_t bytes, std::size_t chunk);

  PairedSeconds hostToDevice();
  PairedSeconds deviceToHost();
  // ZRT's copies once more each way with a fresh byte pattern, read back: throws ExternalError
  // when a byte did not arrive, so no rate is reported for copies that did not happen.
  void verify();
  std::size_t bytes() const { return bytes_; }

 private:
  double zrtCopy(bool toDevice);
  double cudaCopy(bool toDevice);

  Device& device_;
  std::size_t bytes_;
  std::size_t chunk_;
  // The yardstick's own memory and stream, straight from the CUDA runtime, one owner each.
  struct FreeHost {
    void operator()(void* p) const { cudaFreeHost(p); }
  };
  struct DestroyStream {
    void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
  };

  DeviceMemory deviceMemory_;
  DeviceMemory zrtHost_;
  std::unique_ptr<Stream> streams_[2];
  std::unique_ptr<void, FreeHost> cudaHost_;  // cudaMallocHost
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, DestroyStream> cudaStream_;
};

}  // namespace zrt::gpubench
