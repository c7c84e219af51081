// Work: the handle of one asynchronous collective, as c10d's Work. isCompleted() polls,
// wait(timeout) blocks until the operation finished (and rethrows its failure), exception()
// hands over a background failure without throwing. Handles are cheap copies of one shared
// state; the backend that runs the operation completes it with WorkState::finish.
// Device backends (NCCL) complete lazily: the state polls a device event instead, and
// waitOnStream() lets a compute stream wait for the operation without blocking the host.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/wait.h"

namespace zrt {
class Event;
class Stream;
}  // namespace zrt

namespace zrt::comm {

class WorkState {
 public:
  explicit WorkState(std::string description) : description_(std::move(description)) {}
  // The description is built only when someone asks (errors, reports): formatting costs more
  // than a small collective.
  explicit WorkState(std::function<std::string()> describe) : describe_(std::move(describe)) {}

  // Marks the operation finished, failed when `error` is set. Later calls are ignored.
  void finish(std::exception_ptr error = nullptr);

  // For device work: `poll` returns true once the device finished (it may throw; the error
  // becomes the work's). `event` is the device event marking completion.
  void setDevicePoll(std::function<bool()> poll, std::shared_ptr<Event> event);

  bool isCompleted();
  void wait(std::chrono::milliseconds timeout);
  std::exception_ptr exception();
  std::string description();
  Event* event() const { return event_.get(); }
  // What the caller was doing when it posted the operation (caller_label.h), for hang reports;
  // nullptr when no label was set. Set once, before the state is shared.
  void setCaller(std::shared_ptr<const std::string> caller) { caller_ = std::move(caller); }
  // Called (outside the state's lock) with the TimeoutError's text before wait() throws it: the
  // backend gives up on the operation (comm/progress_thread.h). Set once, before sharing.
  void setOnTimeout(std::function<void(const std::string&)> hook) { onTimeout_ = std::move(hook); }
  // Which progress thread runs it, and its number there: a wait on it is published as the
  // caller being blocked (CallerLabel::Blocked). Set once, before sharing.
  void setOrigin(int lane, std::uint64_t seq) {
    lane_ = lane;
    seq_ = seq;
  }
  const std::shared_ptr<const std::string>& caller() const { return caller_; }

 private:
  void pollDevice();  // under mu_

  std::string description_;
  std::function<std::string()> describe_;
  std::shared_ptr<const std::string> caller_;
  std::function<void(const std::string&)> onTimeout_;
  int lane_ = -1;
  std::uint64_t seq_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::function<bool()> poll_;
  std::shared_ptr<Event> event_;
};

class Work {
 public:
  // An empty handle is a completed operation (what a no-op collective returns).
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}

  bool isCompleted() const { return !state_ || state_->isCompleted(); }
  // Blocks until the operation finished; rethrows its failure. Throws TimeoutError naming the
  // operation when it is not finished after `timeout` (the operation itself goes on).
  void wait(std::chrono::milliseconds timeout = defaultWaitTimeout()) const {
    if (state_) state_->wait(timeout);
  }
  // The failure of a finished operation; null while running or after success.
  std::exception_ptr exception() const { return state_ ? state_->exception() : nullptr; }
  std::string description() const { return state_ ? state_->description() : std::string("no-op"); }
  // The device event that marks completion (NCCL); null for host work.
  Event* deviceEvent() const { return state_ ? state_->event() : nullptr; }

 private:
  std::shared_ptr<WorkState> state_;
};

// Makes work queued on `stream` after this call wait for `work`: through its device event
// when it has one (the host does not block), else by blocking the caller until it finished.
void waitOnStream(const Work& work, Stream& stream,
                  std::chrono::milliseconds timeout = defaultWaitTimeout());

// Waits for every handle in order; rethrows the first failure after all were waited for.
void waitAll(const std::vector<Work>& works,
             std::chrono::milliseconds timeout = defaultWaitTimeout());

// Calls complete(k) for k = 0 .. n-1, every one even after a failure (each may hold buffers an
// operation still uses), then rethrows the first failure. The bucketers finish their buckets so.
void completeAll(std::size_t n, const std::function<void(std::size_t)>& complete);

}  // namespace zrt::comm
