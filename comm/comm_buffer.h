// CommBuffer: memory a Communicator moves fastest, from Communicator::allocateBuffer (as NCCL's
// ncclMemAlloc). The MPI backend places it in an MPI shared-memory window when ranks share a
// node, so its shared-memory path reads peers' buffers in place instead of copying them through
// staging; a device backend (NCCL) returns device memory; the others ordinary 64-byte-aligned
// memory. Move-only; freeing returns the memory (for a shared window that is collective: free
// buffers in the same order on every rank).
// Thread-safety: none; one owner.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"
#include "core/memory_ledger.h"

namespace zrt::comm {

// Where the bucketers' communicator buffers (reduce staging, gather packing) live with the host
// backends (the MPI backend's shared windows, the threads backend's CommBuffer::host): host
// memory, charged by the bucketer that asked. A backend that takes device memory only (NCCL)
// hands out device memory instead (Communicator::bufferPlace, CommBuffer::onDevice), which the
// device charges itself. zrt-plan places comm buckets by this constant: it plans the MPI backend.
// What a bucketer keeps on the caller's side (its accumulation memory) is on the caller's device
// when it has one.
inline constexpr MemPlace kBucketMemoryPlace = MemPlace::Host;

class CommBuffer {
 public:
  // What keeps the memory alive; its destructor frees it.
  struct Owner {
    virtual ~Owner() = default;
  };

  CommBuffer() = default;
  CommBuffer(void* data, std::size_t bytes, std::unique_ptr<Owner> owner)
      : data_(data), bytes_(bytes), owner_(std::move(owner)) {}
  CommBuffer(CommBuffer&&) noexcept = default;
  CommBuffer& operator=(CommBuffer&&) noexcept = default;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  void reset() {
    owner_.reset();
    data_ = nullptr;
    bytes_ = 0;
  }

  // Zeroed host memory aligned to 64 bytes (the default for backends without special memory).
  static CommBuffer host(std::size_t bytes);
  // Zeroed memory of `device` (a backend that takes device memory only), charged by the device
  // to its ledger as CommBuckets.
  static CommBuffer onDevice(Device& device, std::size_t bytes);

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::unique_ptr<Owner> owner_;
};

}  // namespace zrt::comm
