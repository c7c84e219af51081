#include "offload/io_request.h"

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace zrt::offload {
namespace detail {

std::string IoRequest::describe() const {
  return zrt::detail::cat(nameOf(dir), " of ", formatBytes(len), " (", len, " bytes) at offset ",
                          offset, " of ", file ? file->name() : std::string("<no file>"));
}

void IoRequest::pieceIssued() {
  std::lock_guard lock(mu);
  ++piecesOutstanding;
}

bool IoRequest::pieceFinished(std::uint64_t bytes, std::exception_ptr err,
                              const Retired& retired) {
  std::unique_lock lock(mu);
  --piecesOutstanding;
  ++piecesDone;
  bytesDone += bytes;
  if (err) {
    cancelled = true;
    if (!error) error = err;
  }
  if (!allIssued || piecesOutstanding != 0) return false;
  completeLocked(lock, retired);
  return true;
}

bool IoRequest::markAllIssued(const Retired& retired) {
  std::unique_lock lock(mu);
  if (allIssued) return false;
  allIssued = true;
  if (piecesOutstanding != 0) return false;
  completeLocked(lock, retired);
  return true;
}

void IoRequest::completeLocked(std::unique_lock<std::mutex>& lock, const Retired& retired) {
  if (!error && bytesDone != len) {
    // Every piece reported success yet the bytes do not add up: a bug, never a success.
    error = std::make_exception_ptr(Error(zrt::detail::cat(
        "internal error: ", describe(), " finished with ", bytesDone, " of ", len, " bytes")));
  }
  if (retired) retired(*this);
  done = true;
  auto callback = std::move(onComplete);
  const std::exception_ptr err = error;
  lock.unlock();
  cv.notify_all();
  if (callback) {
    try {
      callback(err);
    } catch (const std::exception& e) {
      logError(zrt::detail::cat("completion callback of ", describe(), " threw: ", e.what()));
    } catch (...) {
      // Runs on a ring thread: anything escaping would end the ring (or the process).
      logError(zrt::detail::cat("completion callback of ", describe(),
                                " threw a non-standard exception"));
    }
  }
}

}  // namespace detail

bool IoHandle::poll() const {
  ZRT_ENFORCE(req_ != nullptr, "poll() on an empty IoHandle");
  std::lock_guard lock(req_->mu);
  return req_->done;
}

void IoHandle::wait(std::chrono::milliseconds timeout) const {
  ZRT_ENFORCE(req_ != nullptr, "wait() on an empty IoHandle");
  std::unique_lock lock(req_->mu);
  // Waits for the engine's rings to finish every piece of this request.
  if (!req_->cv.wait_for(lock, timeout, [&] { return req_->done; })) {
    ZRT_THROW(TimeoutError, "waited ", static_cast<double>(timeout.count()) / 1000.0, " s for ",
              req_->describe(), ": ", req_->bytesDone, " of ", req_->len, " bytes done, ",
              req_->piecesOutstanding, " transfers still in flight",
              req_->allIssued ? "" : ", more not yet issued (the engine is busy)");
  }
  if (req_->error) std::rethrow_exception(req_->error);
}

std::exception_ptr IoHandle::error() const {
  ZRT_ENFORCE(req_ != nullptr, "error() on an empty IoHandle");
  std::lock_guard lock(req_->mu);
  return req_->error;
}

std::size_t IoHandle::bytes() const { return req_ ? req_->len : 0; }

std::string IoHandle::describe() const { return req_ ? req_->describe() : "<empty handle>"; }

void waitAll(std::span<const IoHandle> handles, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::exception_ptr first;
  for (const IoHandle& h : handles) {
    if (!h.valid()) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      h.wait(std::max(left, std::chrono::milliseconds(0)));
    } catch (const TimeoutError&) {
      throw;  // Still in flight: nothing more can be said about the others in time.
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace zrt::offload
