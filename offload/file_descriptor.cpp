#include "offload/file_descriptor.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/log.h"

namespace zrt::offload {

FileDescriptor::~FileDescriptor() { reset(); }

FileDescriptor::FileDescriptor(FileDescriptor&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void FileDescriptor::reset() {
  if (fd_ < 0) return;
  // close() is not retried on EINTR: on Linux the descriptor is released either way.
  if (::close(fd_) != 0) ZRT_WARN("close(fd ", fd_, ") failed: ", std::strerror(errno));
  fd_ = -1;
}

}  // namespace zrt::offload
