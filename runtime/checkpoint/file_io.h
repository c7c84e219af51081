// The POSIX file operations checkpoints need, each checked and each error naming the path, the
// offset and strerror: an owning file descriptor, exact positioned reads, writes that loop over
// short writes, fsync of files and directories, exclusive creation (O_EXCL | O_NOFOLLOW, mode
// 0600; directories 0700), renames that never replace, and XXH3-64 checksums of whole files.
// Thread-safety: a File is used by one thread; the free functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace zrt::checkpoint {

// One open file descriptor; closing it is checked (close() reports a failure, the destructor
// only logs one, since it cannot throw).
class File {
 public:
  // A new file; fails if the path exists (even as a dangling link).
  static File createExclusive(const std::string& path);
  // An existing regular file, read-only. A link, a FIFO, a device or a directory is refused
  // with an IoError naming the path and what it is, without blocking (a FIFO with no writer
  // would hold a plain open forever).
  static File openRead(const std::string& path);
  // A directory, to fsync it.
  static File openDirectory(const std::string& path);
  // Takes ownership of an open descriptor (from mkostemp).
  static File adopt(int fd, std::string path) { return File(fd, std::move(path)); }

  File() = default;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }
  std::uint64_t size() const;
  // Writes all of `bytes`, looping over short writes and EINTR; IoError with errno (ENOSPC for
  // a full disk) naming the file and the offset.
  void writeAll(const void* data, std::size_t bytes);
  // Reads exactly `bytes` at `offset`; a short read (the file is shorter) is an IoError.
  void readAt(void* out, std::size_t bytes, std::uint64_t offset) const;
  void sync();
  void close();

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  std::uint64_t written_ = 0;
};

// Creates `path` (mode 0700) or accepts an existing directory that is not a link.
void makeDirectory(const std::string& path);
// A new directory `<parent>/<prefix>XXXXXX` (mode 0700); returns its path.
std::string makeTempDirectory(const std::string& parent, const std::string& prefix);
// Removes a directory and the files in it (one level: checkpoints have no subfolders); returns
// what could not be removed, empty on success (cleanup after a failure must not hide it).
std::string removeTree(const std::string& path);
// rename(2) that fails when `to` exists (renameat2 RENAME_NOREPLACE).
void renameNoReplace(const std::string& from, const std::string& to);
void syncDirectory(const std::string& path);
bool pathExists(const std::string& path);
bool isDirectory(const std::string& path);
bool isRegularFile(const std::string& path);
// A whole small file (refused above maxBytes, so a corrupt size cannot exhaust memory).
std::string readSmallFile(const std::string& path, std::uint64_t maxBytes);
// `content` written to <dir>/<name>.tmp-XXXXXX, fsynced, renamed over <dir>/<name> (replacing
// it atomically), and the directory fsynced.
void replaceFileAtomically(const std::string& dir, const std::string& name, const std::string& content);

// XXH3-64 of a whole file and its size.
struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};
FileDigest digestFile(const std::string& path);
std::string hexDigest(std::uint64_t h);  // 16 lowercase hex digits

// Joins path parts with one '/'.
std::string joinPath(const std::string& a, const std::string& b);

}  // namespace zrt::checkpoint
