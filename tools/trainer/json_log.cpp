#include "json_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace zrt::trainer {

JsonLog::JsonLog(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    ZRT_THROW(InvalidArgument, "--json-log ", path, ": cannot open for writing (", std::strerror(errno), ")");
}

JsonLog::~JsonLog() {
  if (fd_ >= 0) ::close(fd_);
}

JsonLog::JsonLog(JsonLog&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      records_(other.records_),
      error_(std::move(other.error_)) {}

JsonLog& JsonLog::operator=(JsonLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    records_ = other.records_;
    error_ = std::move(other.error_);
  }
  return *this;
}

void JsonLog::write(const std::string& record) {
  if (fd_ < 0 || failed()) return;
  const std::string line = record + '\n';
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(n < 0 ? errno : ENOSPC);  // 0 bytes written: no room, say so
    done += static_cast<std::size_t>(n);
  }
  ++records_;
}

void JsonLog::close() {
  if (fd_ < 0) return;
  const int rc = ::close(std::exchange(fd_, -1));
  if (rc != 0 && errno != EINTR && !failed()) fail(errno);
}

void JsonLog::fail(int err) {
  error_ = detail::cat("--json-log ", path_, ": write failed after ", records_, " records (",
                       std::strerror(err), ")");
  std::fprintf(stderr, "zrt-train: warning: %s; later records are not written, and the run will exit 1\n",
               error_.c_str());
  std::fflush(stderr);
}

}  // namespace zrt::trainer
