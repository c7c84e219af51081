#include "offload/offload_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "offload/aligned_buffer.h"
#include "offload/block_size.h"
#include "offload/io_error.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace zrt::offload {

StripeLocation locateStripe(std::uint64_t offset, std::size_t stripes, std::uint64_t unit) {
  if (stripes <= 1) return {0, offset, std::numeric_limits<std::uint64_t>::max()};
  const std::uint64_t k = offset / unit;
  const std::uint64_t within = offset % unit;
  return {static_cast<std::size_t>(k % stripes), (k / stripes) * unit + within, unit - within};
}

std::uint64_t stripeLength(std::uint64_t logicalBytes, std::size_t stripes, std::uint64_t unit,
                           std::size_t stripe) {
  if (stripes <= 1) return logicalBytes;
  const std::uint64_t round = unit * stripes;
  const std::uint64_t full = logicalBytes / round * unit;
  const std::uint64_t rest = logicalBytes % round;
  const std::uint64_t before = static_cast<std::uint64_t>(stripe) * unit;
  return full + (rest > before ? std::min(unit, rest - before) : 0);
}

namespace {

std::string freeSpace(const std::filesystem::path& path) {
  struct statvfs st {};
  if (::statvfs(path.parent_path().empty() ? "." : path.parent_path().c_str(), &st) != 0)
    return "unknown";
  return formatBytes(static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize);
}

// What an open's errno means for the user, beyond strerror's words.
std::string whyRefused(int err, const FileOpenOptions& options) {
  if (err == ELOOP) return " (it is a symbolic link: files are never opened through one)";
  if (err == EEXIST && options.exclusive)
    return " (something already has that name, a symbolic link perhaps: it is left untouched)";
  if (err == EINVAL && options.direct == DirectIo::On)
    return " (the file system does not support direct I/O; set direct I/O to auto or off)";
  return "";
}

}  // namespace

std::shared_ptr<OffloadFile> OffloadFile::open(const std::vector<std::filesystem::path>& paths,
                                               const FileOpenOptions& options) {
  if (paths.empty()) ZRT_THROW(InvalidArgument, "OffloadFile::open: no path given");
  if (paths.size() > 1 && (options.stripeUnit == 0 || options.stripeUnit % 4096 != 0))
    ZRT_THROW(InvalidArgument, "stripe unit ", options.stripeUnit,
              " must be a positive multiple of 4096 bytes");
  std::shared_ptr<OffloadFile> file(new OffloadFile());
  file->unit_ = options.stripeUnit;
  // O_NOFOLLOW on every open, the buffered retry included: a link planted where a swap file
  // goes must never turn its writes (or its preallocation) onto the file it points to.
  int flags = (options.readOnly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  if (!options.userNamedPath) flags |= O_NOFOLLOW;
  if (options.create) flags |= O_CREAT;
  if (options.create && options.exclusive) flags |= O_EXCL;
  if (options.truncate) flags |= O_TRUNC;
  const auto mode = static_cast<mode_t>(options.mode);
  for (const auto& path : paths) {
    Stripe s;
    s.path = path;
    int fd = -1;
    bool directRefused = false;
    if (options.direct != DirectIo::Off) {
      fd = ::open(path.c_str(), flags | O_DIRECT, mode);
      if (fd >= 0) {
        s.direct = true;
      } else if (errno == EINVAL && options.direct == DirectIo::Auto) {
        // The file system has no O_DIRECT (ramfs, some FUSE and network file systems).
        directRefused = true;
        warnOnce("buffered-fallback:" + path.parent_path().string(),
                 zrt::detail::cat("the file system holding '", path.parent_path().string(),
                             "' does not support O_DIRECT: using buffered I/O through the "
                             "page cache there (slower, and it competes for host memory)"));
      } else {
        const int err = errno;
        ZRT_THROW_ERRNO(err, "cannot open '", path.string(), "' with O_DIRECT: ",
                        std::strerror(err), whyRefused(err, options));
      }
    }
    if (fd < 0) {
      // The refused O_DIRECT open may already have created the file (the kernel checks
      // O_DIRECT after creating it), so an exclusive create must not insist a second time.
      const int retryFlags = directRefused ? flags & ~O_EXCL : flags;
      fd = ::open(path.c_str(), retryFlags, mode);
      if (fd < 0) {
        const int err = errno;
        ZRT_THROW_ERRNO(err, "cannot open '", path.string(), "': ", std::strerror(err),
                        whyRefused(err, options));
      }
    }
    s.fd = FileDescriptor(fd);
    // Without O_EXCL (the buffered retry, or a caller's plain create) the name may have been
    // another file's hard link, or something other than a file: neither is a swap file.
    struct stat st {};
    if (options.userNamedPath) {
      // taken as the user named it
    } else if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ZRT_THROW_ERRNO(err, "cannot stat '", path.string(), "': ", std::strerror(err));
    } else if (!S_ISREG(st.st_mode)) {
      ZRT_THROW_ERRNO(EINVAL, "'", path.string(), "' is not a regular file");
    } else if (options.create && options.exclusive && st.st_nlink != 1) {
      ZRT_THROW_ERRNO(EEXIST, "'", path.string(), "' was created here but has ", st.st_nlink,
                      " names: another process linked it meanwhile");
    }
    // Only a file this call created for sure (exclusive) gets its mode set exactly; an existing
    // file keeps the mode its owner gave it.
    if (options.create && options.exclusive && ::fchmod(fd, mode) != 0) {
      const int err = errno;
      ZRT_THROW_ERRNO(err, "cannot set mode ", std::oct, options.mode, " on '", path.string(),
                      "': ", std::strerror(err));
    }
    if (s.direct) {
      file->alignment_ = std::max(file->alignment_, logicalBlockSize(path.parent_path().empty()
                                                                         ? std::filesystem::path(".")
                                                                         : path.parent_path()));
    }
    file->stripes_.push_back(std::move(s));
  }
  if (paths.size() > 1 && file->unit_ % file->alignment_ != 0)
    ZRT_THROW(InvalidArgument, "stripe unit ", file->unit_, " is not a multiple of the ",
              file->alignment_, "-byte logical block size of ", file->name());
  return file;
}

bool OffloadFile::anyDirect() const {
  return std::any_of(stripes_.begin(), stripes_.end(), [](const Stripe& s) { return s.direct; });
}

std::string OffloadFile::name() const {
  std::string out;
  for (const auto& s : stripes_) {
    if (!out.empty()) out += " + ";
    out += s.path.string();
  }
  return out;
}

std::uint64_t OffloadFile::preallocate(std::uint64_t logicalBytes) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < stripes_.size(); ++i) {
    const std::uint64_t len =
        alignUp(stripeLength(logicalBytes, stripes_.size(), unit_, i), alignment_);
    total += len;
    if (len == 0) continue;
    const int rc = ::fallocate(stripes_[i].fd.get(), 0, 0, static_cast<off_t>(len));
    if (rc == 0) continue;
    int err = errno;
    const char* call = "fallocate";
    if (err == EOPNOTSUPP) {
      warnOnce("no-fallocate:" + stripes_[i].path.parent_path().string(),
               zrt::detail::cat("the file system holding '", stripes_[i].path.parent_path().string(),
                           "' has no fallocate: swap space is not reserved ahead and may run "
                           "out during training"));
      if (::ftruncate(stripes_[i].fd.get(), static_cast<off_t>(len)) == 0) continue;
      // Report why the fallback failed, not fallocate's EOPNOTSUPP.
      err = errno;
      call = "ftruncate";
    }
    ZRT_THROW_ERRNO(err, "cannot reserve ", formatBytes(len), " for '", stripes_[i].path.string(),
                    "' (", call, "): ", std::strerror(err), " (the file system has ",
                    freeSpace(stripes_[i].path), " free)");
  }
  return total;
}

void OffloadFile::sync() {
  for (const auto& s : stripes_) {
    if (::fdatasync(s.fd.get()) != 0) {
      const int err = errno;
      ZRT_THROW_ERRNO(err, "fdatasync of '", s.path.string(), "' failed: ", std::strerror(err));
    }
  }
}

}  // namespace zrt::offload
