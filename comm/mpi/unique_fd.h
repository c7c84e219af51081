// UniqueFd: the move-only owner of one file descriptor (a pidfd or a socket); closes it on
// destruction. release() hands the descriptor to the process's exit instead (a liveness socket
// left open while the process unwinds, so its peers see the exit, not the unwinding).
// Not thread-safe: one owner at a time; get() may be copied out for readers that outlive nothing.
#pragma once

#include <unistd.h>

#include <utility>

namespace zrt::comm {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  // close(2) on Linux frees the descriptor even when it reports an error (EINTR, or EIO from a
  // socket's last write): there is nothing to retry and nothing a reader could act on.
  void reset() noexcept {
    if (fd_ >= 0) (void)::close(std::exchange(fd_, -1));
  }

 private:
  int fd_ = -1;
};

}  // namespace zrt::comm
