#include "runtime/checkpoint/file_io.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "core/error.h"
#include "core/log.h"
#include "offload/cleanup_registry.h"
#include "runtime/checkpoint/fault_injection.h"

namespace zrt::checkpoint {
namespace {

std::string errnoText(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

// An IoError carrying errno, with the "[rank R] file:line:" every ZRT error starts with.
#define ZRT_THROW_ERRNO(what, e)                                                                       \
  do {                                                                                            \
    const int zrt_errno_ = (e);                                                                   \
    throw IoError(detail::where(__FILE__, __LINE__) + "checkpoint: " + (what) + ": " + errnoText(zrt_errno_), \
                  zrt_errno_);                                                                    \
  } while (0)

constexpr std::size_t kChunk = std::size_t{8} << 20;

const char* fileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "of an unknown type";
}

}  // namespace

File File::createExclusive(const std::string& path) {
  faultPoint();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) ZRT_THROW_ERRNO("cannot create " + path, errno);
  return File(fd, path);
}

File File::openRead(const std::string& path) {
  // O_NONBLOCK: a blocking open of a FIFO waits for a writer that may never come, so the type
  // is checked on the open descriptor first and blocking restored only for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) ZRT_THROW_ERRNO("cannot open " + path, errno);
  File f(fd, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) ZRT_THROW_ERRNO("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode))
    ZRT_THROW(IoError, "checkpoint: ", path, " is ", fileTypeName(st.st_mode),
              ", not a regular file");
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    ZRT_THROW_ERRNO("cannot set up " + path, errno);
  return f;
}

File File::openDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) ZRT_THROW_ERRNO("cannot open directory " + path, errno);
  return File(fd, path);
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), written_(other.written_) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0 && ::close(fd_) != 0) logWarning("checkpoint: closing " + path_ + ": " + errnoText(errno));
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    written_ = other.written_;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0 && ::close(fd_) != 0) logWarning("checkpoint: closing " + path_ + ": " + errnoText(errno));
}

std::uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) ZRT_THROW_ERRNO("cannot stat " + path_, errno);
  return static_cast<std::uint64_t>(st.st_size);
}

void File::writeAll(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    faultPoint();
    if (injectNoSpace()) ZRT_THROW_ERRNO(detail::cat("cannot write ", path_, " at offset ", written_), ENOSPC);
    const std::size_t n = std::min(bytes, kChunk);
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      ZRT_THROW_ERRNO(detail::cat("cannot write ", path_, " at offset ", written_), errno);
    }
    // A short write (a signal, a nearly full disk) is resumed; the next call reports ENOSPC.
    p += w;
    bytes -= static_cast<std::size_t>(w);
    written_ += static_cast<std::uint64_t>(w);
  }
}

void File::readAt(void* out, std::size_t bytes, std::uint64_t offset) const {
  char* p = static_cast<char*>(out);
  std::uint64_t at = offset;
  while (bytes > 0) {
    const ssize_t r = ::pread(fd_, p, std::min(bytes, kChunk), static_cast<off_t>(at));
    if (r < 0) {
      if (errno == EINTR) continue;
      ZRT_THROW_ERRNO(detail::cat("cannot read ", path_, " at offset ", at), errno);
    }
    if (r == 0)
      ZRT_THROW(IoError, "checkpoint: ", path_, " ends at byte ", at, " but ", bytes,
                " more bytes were expected there (truncated?)");
    p += r;
    bytes -= static_cast<std::size_t>(r);
    at += static_cast<std::uint64_t>(r);
  }
}

void File::sync() {
  faultPoint();
  if (::fsync(fd_) != 0) ZRT_THROW_ERRNO("cannot fsync " + path_, errno);
}

void File::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0 && ::close(fd) != 0) ZRT_THROW_ERRNO("cannot close " + path_, errno);
}

void makeDirectory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return;
  const int e = errno;
  if (e != EEXIST) ZRT_THROW_ERRNO("cannot create directory " + path, e);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) ZRT_THROW_ERRNO("cannot stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) ZRT_THROW(IoError, "checkpoint: ", path, " exists and is not a directory (or is a link)");
}

std::string makeTempDirectory(const std::string& parent, const std::string& prefix) {
  faultPoint();
  std::string templ = joinPath(parent, prefix + "XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) ZRT_THROW_ERRNO("cannot create a temporary directory " + templ, errno);
  return std::string(buf.data());
}

std::string removeTree(const std::string& path) {
  // Relative to the directory's own fd, never through a link (offload/cleanup_registry.h): a
  // link swapped in for the temporary directory must not make this delete what it points to.
  const int e = offload::removeDirectoryFlat(path.c_str());
  return e == 0 ? "" : "cannot remove " + path + ": " + errnoText(e);
}

void renameNoReplace(const std::string& from, const std::string& to) {
  faultPoint();
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0)
    ZRT_THROW_ERRNO("cannot rename " + from + " to " + to, errno);
}

void syncDirectory(const std::string& path) {
  File d = File::openDirectory(path);
  d.sync();
  d.close();
}

bool pathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool isRegularFile(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string readSmallFile(const std::string& path, std::uint64_t maxBytes) {
  const File f = File::openRead(path);
  const std::uint64_t n = f.size();
  if (n > maxBytes)
    ZRT_THROW(IoError, "checkpoint: ", path, " holds ", n, " bytes, more than the ", maxBytes,
              " such a file may have (corrupt?)");
  std::string s(n, '\0');
  f.readAt(s.data(), n, 0);
  return s;
}

void replaceFileAtomically(const std::string& dir, const std::string& name, const std::string& content) {
  faultPoint();
  std::string templ = joinPath(dir, name + ".tmp-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  // mkstemp creates with O_EXCL and mode 0600.
  const int fd = ::mkostemp(buf.data(), O_CLOEXEC);
  if (fd < 0) ZRT_THROW_ERRNO("cannot create " + templ, errno);
  const std::string tmp(buf.data());
  File f = File::adopt(fd, tmp);
  try {
    f.writeAll(content.data(), content.size());
    f.sync();
    f.close();
    faultPoint();
    if (::rename(tmp.c_str(), joinPath(dir, name).c_str()) != 0)
      ZRT_THROW_ERRNO("cannot rename " + tmp + " to " + joinPath(dir, name), errno);
  } catch (...) {
    ::unlink(tmp.c_str());  // best effort: the error in flight says what went wrong
    throw;
  }
  syncDirectory(dir);
}

FileDigest digestFile(const std::string& path) {
  const File f = File::openRead(path);
  FileDigest d;
  d.bytes = f.size();
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), &XXH3_freeState);
  if (!st || XXH3_64bits_reset(st.get()) != XXH_OK) ZRT_THROW(Error, "checkpoint: cannot set up an XXH3 state");
  std::vector<char> buf(std::min<std::uint64_t>(d.bytes, kChunk));
  for (std::uint64_t at = 0; at < d.bytes;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), d.bytes - at));
    f.readAt(buf.data(), n, at);
    if (XXH3_64bits_update(st.get(), buf.data(), n) != XXH_OK) ZRT_THROW(Error, "checkpoint: XXH3 update failed");
    at += n;
  }
  d.xxh3 = XXH3_64bits_digest(st.get());
  return d;
}

std::string hexDigest(std::uint64_t h) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

std::string joinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

}  // namespace zrt::checkpoint
