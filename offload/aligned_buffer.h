// AlignedBuffer: a move-only owner of zero-filled heap memory whose address and size are
// multiples of an alignment, as O_DIRECT needs. The engine keeps tail padding in these; tests
// and zrt-io use them as I/O buffers. Not thread-safe: plain memory.
#pragma once

#include <cstddef>

namespace zrt::offload {

class AlignedBuffer {
 public:
  // Zero: the bytes start zeroed. Untouched: left as the allocator gives them, so that the first
  // writer's thread places the pages (a benchmark's parallel fill puts them near its threads).
  enum class Init { Zero, Untouched };

  AlignedBuffer() = default;
  // `bytes` is rounded up to a multiple of `alignment` (a power of two, at least 8).
  explicit AlignedBuffer(std::size_t bytes, std::size_t alignment = 4096, Init init = Init::Zero);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return data_; }
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }
  // Advises the kernel to back the buffer with transparent huge pages (fewer TLB misses for
  // streaming kernels); advice only, ignored where refused.
  void adviseHugePages() const;
  std::size_t size() const { return size_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Rounds up/down to a multiple of `align` (any positive value, not only powers of two).
constexpr std::size_t alignUp(std::size_t v, std::size_t align) {
  return (v + align - 1) / align * align;
}
constexpr std::size_t alignDown(std::size_t v, std::size_t align) { return v / align * align; }

}  // namespace zrt::offload
