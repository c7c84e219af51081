// OffloadFile: one logical file the engine reads and writes, stored as one file or striped
// over several (one per nvme_path directory, so one large request spreads over drives and
// their bandwidths add up). Logical stripe unit k lives in stripe k % N at offset
// (k / N) * unit. Each stripe is opened with O_DIRECT where its file system allows it; where
// it refuses (EINVAL), that stripe uses buffered I/O with one warning, unless O_DIRECT was
// required. Thread-safety: immutable after open(); share it freely (the engine keeps a
// reference while requests on it are in flight, so descriptors outlive their I/O).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_options.h"
#include "offload/file_descriptor.h"

namespace zrt::offload {

struct FileOpenOptions {
  DirectIo direct = DirectIo::Auto;
  bool readOnly = false;
  bool create = false;
  bool exclusive = false;  // with create: fail if the file exists
  bool truncate = false;
  unsigned mode = 0600;    // for created files; with exclusive, set exactly (no umask)
  // A path the user named (zrt-io's --filename, as fio's): a link is followed and a device is
  // fine. Otherwise a link is refused (O_NOFOLLOW) and only a regular file is accepted.
  bool userNamedPath = false;
  std::uint64_t stripeUnit = 1 << 20;  // bytes per stripe unit with several paths
};

// Where logical `offset` lives: which stripe, the offset inside that stripe's file, and how
// many bytes follow contiguously in that stripe (to the end of the stripe unit).
struct StripeLocation {
  std::size_t stripe = 0;
  std::uint64_t fileOffset = 0;
  std::uint64_t contiguous = 0;
};
StripeLocation locateStripe(std::uint64_t offset, std::size_t stripes, std::uint64_t unit);

// Bytes of a `logicalBytes`-long file that stripe `stripe` holds.
std::uint64_t stripeLength(std::uint64_t logicalBytes, std::size_t stripes, std::uint64_t unit,
                           std::size_t stripe);

class OffloadFile {
 public:
  static std::shared_ptr<OffloadFile> open(const std::vector<std::filesystem::path>& paths,
                                           const FileOpenOptions& options);
  static std::shared_ptr<OffloadFile> open(const std::filesystem::path& path,
                                           const FileOpenOptions& options) {
    return open(std::vector<std::filesystem::path>{path}, options);
  }

  std::size_t stripes() const { return stripes_.size(); }
  const std::filesystem::path& path(std::size_t stripe) const { return stripes_[stripe].path; }
  int fd(std::size_t stripe) const { return stripes_[stripe].fd.get(); }
  bool direct(std::size_t stripe) const { return stripes_[stripe].direct; }
  bool anyDirect() const;
  // What buffer addresses, offsets and lengths must be multiples of for O_DIRECT: the largest
  // logical block size among the O_DIRECT stripes; 1 when every stripe is buffered.
  std::size_t alignment() const { return alignment_; }
  std::uint64_t stripeUnit() const { return unit_; }
  // The path, or "a + b + c" for a striped file.
  std::string name() const;

  // Reserves disk space for a logical size of `logicalBytes` (each stripe's share rounded up
  // to the alignment, where the engine writes tail padding) with fallocate. File systems
  // without fallocate get ftruncate and one warning. Throws IoError naming the stripe, the
  // bytes asked and the space free (ENOSPC). Returns the bytes reserved over all stripes.
  std::uint64_t preallocate(std::uint64_t logicalBytes);

  // fdatasync on every stripe (buffered stripes need it for durability).
  void sync();

 private:
  struct Stripe {
    std::filesystem::path path;
    FileDescriptor fd;
    bool direct = false;
  };
  OffloadFile() = default;

  std::vector<Stripe> stripes_;
  std::uint64_t unit_ = 0;
  std::size_t alignment_ = 1;
};

}  // namespace zrt::offload
