// The I/O engine interface, in fio's mould: a caller prepares a unit, queues it (three-way
// answer: completed now, queued, or busy until it commits and reaps), commits the queued units
// to the kernel in one batch, and reaps completions. Engines live in their own files:
// io_uring (uring_engine.h), a thread pool with pread/pwrite (thread_pool_engine.h), a null
// engine that moves no bytes (null_engine.h) and a fault-injecting wrapper for tests
// (fault_injecting_engine.h). An engine moves bytes once per unit; short transfers and retries
// are the caller's business (offload_engine.cpp).
// Thread-safety: one thread drives an engine (prepare, queue, commit, reap); only wake() may be
// called from any thread.
#pragma once

#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zrt::offload {

enum class IoDir : std::uint8_t { Read, Write };

inline std::string_view nameOf(IoDir dir) { return dir == IoDir::Read ? "read" : "write"; }

// One transfer between a buffer and a file. The caller owns the unit and keeps it alive (and
// unmoved) from queue() until reap() hands it back.
struct IoUnit {
  IoDir dir = IoDir::Read;
  int fd = -1;
  void* buf = nullptr;
  std::size_t len = 0;
  std::uint64_t offset = 0;
  // Set by prepare(): the registered buffer that holds [buf, buf + len), or -1.
  int bufIndex = -1;
  // Set on completion: bytes transferred (possibly fewer than len) or -errno.
  std::int64_t result = 0;
  // The caller's; engines never touch it.
  void* owner = nullptr;
};

enum class QueueResult {
  Completed,  // done already: unit.result is set and reap() will not report it
  Queued,     // accepted: commit() sends it, reap() reports it
  Busy,       // no room: commit and reap first, then queue again
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  virtual std::string_view name() const = 0;
  // Units that may be queued or in flight at once.
  virtual std::size_t depth() const = 0;

  // Registers buffers for fixed-buffer I/O. Returns 0, or an errno when the engine has no
  // such thing (EOPNOTSUPP) or the kernel refuses (ENOMEM for RLIMIT_MEMLOCK, EFAULT for memory
  // it cannot pin); the engine then keeps working without them and the caller warns.
  virtual int registerBuffers(std::span<const iovec> buffers) {
    (void)buffers;
    return EOPNOTSUPP;
  }
  // Engine-specific setup of a unit before queue() (fixed-buffer lookup).
  virtual void prepare(IoUnit& unit) { unit.bufIndex = -1; }
  virtual QueueResult queue(IoUnit& unit) = 0;
  // Sends every queued unit to the kernel (or the pool).
  virtual void commit() = 0;
  // Appends finished units to `done`. Returns once at least `minEvents` have finished, or
  // wake() was called, or `timeout` passed, whichever comes first.
  virtual void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
                    std::vector<IoUnit*>& done) = 0;
  // Makes a reap() that is blocked (or the next one) return early. Any thread.
  virtual void wake() = 0;
};

}  // namespace zrt::offload
