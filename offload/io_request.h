// IoRequest: the shared state of one read or write the engine is carrying out, and IoHandle,
// the caller's view of it. A request is split into pieces (transfers of at most block_size);
// it completes when every piece issued has finished and no more will be issued, with the
// first error if any piece failed. Nothing reports success for bytes that did not land.
// Thread-safety: IoHandle may be polled and waited on from any thread, by several at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "offload/aligned_buffer.h"
#include "offload/io_engine.h"
#include "offload/offload_file.h"
#include "core/wait.h"

namespace zrt::offload {

namespace detail {

struct IoRequest {
  IoDir dir = IoDir::Read;
  std::shared_ptr<OffloadFile> file;
  std::uint64_t offset = 0;
  std::byte* buf = nullptr;
  std::size_t len = 0;
  // Bytes moved straight between the caller's buffer and the file; the rest (under O_DIRECT,
  // when len is not a multiple of the alignment) goes through `tail`, one padded block.
  std::size_t directLen = 0;
  AlignedBuffer tail;
  std::function<void(std::exception_ptr)> onComplete;
  // Set by the engine when it accepts the request: its number there (for the outstanding set)
  // and when, so stats() can say how long the oldest one has waited.
  std::uint64_t seq = 0;
  std::chrono::steady_clock::time_point accepted{};

  // Issuing, guarded by the engine's scheduler lock.
  std::uint64_t cursor = 0;

  // Completion, guarded by mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::size_t piecesOutstanding = 0;
  std::size_t piecesDone = 0;
  bool allIssued = false;
  bool done = false;
  bool cancelled = false;  // a piece failed: issue no more
  std::uint64_t bytesDone = 0;
  std::exception_ptr error;

  std::string describe() const;
  bool isCancelled() const {
    std::lock_guard lock(mu);
    return cancelled;
  }
  // Called by the engine. The last two return true when their call completed the request;
  // `retired` then runs before any waiter can see it done, so the engine's own accounting of
  // the request (its counters, its list of outstanding requests) is settled when wait() returns.
  using Retired = std::function<void(const IoRequest&)>;
  void pieceIssued();
  bool pieceFinished(std::uint64_t bytes, std::exception_ptr err, const Retired& retired);
  bool markAllIssued(const Retired& retired);

 private:
  void completeLocked(std::unique_lock<std::mutex>& lock, const Retired& retired);
};

}  // namespace detail

class IoHandle {
 public:
  IoHandle() = default;
  explicit IoHandle(std::shared_ptr<detail::IoRequest> request) : req_(std::move(request)) {}

  bool valid() const { return req_ != nullptr; }
  // True once the request has finished, successfully or not. Never blocks.
  bool poll() const;
  // Blocks until the request finishes; rethrows its error (IoError naming the file, offset,
  // length and errno text); throws TimeoutError saying what it waited for after `timeout`.
  void wait(std::chrono::milliseconds timeout = defaultWaitTimeout()) const;
  // After completion: the error, or nullptr on success.
  std::exception_ptr error() const;
  std::size_t bytes() const;
  // "read of 8.00 MiB at offset 0 of /nvme/x".
  std::string describe() const;

 private:
  std::shared_ptr<detail::IoRequest> req_;
};

// Waits for every handle (each with what is left of `timeout`); rethrows the first error
// after all have finished, so no request is left in flight behind an exception.
void waitAll(std::span<const IoHandle> handles,
             std::chrono::milliseconds timeout = defaultWaitTimeout());

}  // namespace zrt::offload
