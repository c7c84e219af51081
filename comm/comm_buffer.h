// CommBuffer: memory a Communicator moves fastest, from Communicator::allocateBuffer (as NCCL's
// ncclMemAlloc). The MPI backend places it in an MPI shared-memory window when ranks share a
// node, so its shared-memory path reads peers' buffers in place instead of copying them through
// staging; other backends return ordinary 64-byte-aligned memory. Move-only; freeing returns the
// memory (for a shared window that is collective: free buffers in the same order on every rank).
// Thread-safety: none; one owner.
#pragma once

#include <cstddef>
#include <memory>

#include "core/memory_ledger.h"

namespace zrt::comm {

// Where the bucketers' communicator buffers (reduce staging, gather packing) live: host memory
// with every backend ZRT has (the MPI backend's shared windows, the threads backend's and NCCL's
// default CommBuffer::host), so they are charged to host memory. zrt-plan places comm buckets by
// this constant, so plan and ledger move together when a backend allocates its buffers on a GPU
// (as NCCL's ncclMemAlloc would): then this rule becomes a function of the communicator. What a
// bucketer keeps on the caller's side (its accumulation memory) is on the caller's device when
// it has one.
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

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::unique_ptr<Owner> owner_;
};

}  // namespace zrt::comm
