// CompletionQueue: the finished units of an engine that completes units itself (the thread-pool
// and null engines), waiting for its reap(), and the wake-up that ends a reap() early. io_uring
// has its own completion ring and does not use it.
// Thread-safety: push() and wake() from any thread; take() from the thread driving the engine.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

#include "offload/io_engine.h"

namespace zrt::offload {

class CompletionQueue {
 public:
  void push(IoUnit* unit);
  void push(const std::vector<IoUnit*>& units);
  // Waits until at least `minEvents` units are queued, wake() was called (since the last take),
  // or `timeout` passed; then appends every queued unit to `done` and returns how many.
  std::size_t take(std::size_t minEvents, std::chrono::milliseconds timeout,
                   std::vector<IoUnit*>& done);
  void wake();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<IoUnit*> finished_;  // guarded by mu_
  bool woken_ = false;             // guarded by mu_
};

}  // namespace zrt::offload
