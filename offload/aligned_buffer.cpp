#include "offload/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <utility>

#include "core/error.h"
#include "core/units.h"

namespace zrt::offload {

AlignedBuffer::AlignedBuffer(std::size_t bytes, std::size_t alignment, Init init) {
  ZRT_ENFORCE(alignment >= 8 && (alignment & (alignment - 1)) == 0,
              "alignment ", alignment, " is not a power of two of at least 8");
  if (bytes == 0) return;
  size_ = alignUp(bytes, alignment);
  void* p = nullptr;
  if (posix_memalign(&p, alignment, size_) != 0) {
    ZRT_THROW(OutOfMemory, "could not allocate an aligned buffer of ", formatBytes(size_));
  }
  if (init == Init::Zero) std::memset(p, 0, size_);
  data_ = static_cast<std::byte*>(p);
}

void AlignedBuffer::adviseHugePages() const {
  if (data_) ::madvise(data_, size_, MADV_HUGEPAGE);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace zrt::offload
