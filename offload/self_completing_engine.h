// SelfCompletingEngine: the part shared by engines that finish units themselves (the thread-pool
// and null engines), as opposed to io_uring, which has its own rings: queue() stages up to
// depth() units not yet reaped, commit() hands the staged units to start(), and reap() / wake()
// go through a CompletionQueue that start()'s work pushes finished units into.
// Thread-safety: as IoEngine; start()'s work may push into completions() from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "offload/completion_queue.h"
#include "offload/io_engine.h"

namespace zrt::offload {

class SelfCompletingEngine : public IoEngine {
 public:
  explicit SelfCompletingEngine(std::size_t depth) : depth_(depth) {}

  std::size_t depth() const override { return depth_; }

  QueueResult queue(IoUnit& unit) override {
    if (outstanding_ >= depth_) return QueueResult::Busy;
    staged_.push_back(&unit);
    ++outstanding_;
    return QueueResult::Queued;
  }

  void commit() override {
    start(staged_);
    staged_.clear();
  }

  void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
            std::vector<IoUnit*>& done) override {
    outstanding_ -= completed_.take(minEvents, timeout, done);
  }

  void wake() override { completed_.wake(); }

 protected:
  // Begins the transfers of `units`; each finished unit (result set) is pushed to completions().
  virtual void start(const std::vector<IoUnit*>& units) = 0;
  CompletionQueue& completions() { return completed_; }

 private:
  std::size_t depth_;
  // Declared before a derived engine's workers, so it outlives them however it is destroyed.
  CompletionQueue completed_;
  std::vector<IoUnit*> staged_;  // queued, not committed; driving thread only
  std::size_t outstanding_ = 0;  // queued or finished, not yet reaped; driving thread only
};

}  // namespace zrt::offload
