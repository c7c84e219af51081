// --json-log's file (rank 0): one record per line, each written through at once so a reader can
// follow the run. A failed write (a full disk, a quota) must not pass unseen: the first one warns
// on stderr, naming the file and the reason, later records are dropped rather than appended after
// a torn line, and the caller turns failed() into a non-zero exit status at the end of the run.
// Thread-safety: one thread writes.
#pragma once

#include <cstdint>
#include <string>

namespace zrt::trainer {

class JsonLog {
 public:
  JsonLog() = default;  // closed: writes nothing
  // Creates or truncates `path`; throws InvalidArgument naming --json-log when it cannot.
  explicit JsonLog(const std::string& path);
  ~JsonLog();
  JsonLog(JsonLog&& other) noexcept;
  JsonLog& operator=(JsonLog&& other) noexcept;
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;

  bool isOpen() const { return fd_ >= 0; }
  // Writes `record` and a newline. After a failure: nothing (the warning was given once).
  void write(const std::string& record);
  // Closes the file; a failed close (a delayed write error) counts as a failed write.
  void close();
  bool failed() const { return !error_.empty(); }
  // "--json-log PATH: write failed after N records (No space left on device)"; "" when none did.
  const std::string& error() const { return error_; }

 private:
  void fail(int err);

  int fd_ = -1;
  std::string path_;
  std::int64_t records_ = 0;  // written in full
  std::string error_;
};

}  // namespace zrt::trainer
