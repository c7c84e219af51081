#include "offload/completion_queue.h"

namespace zrt::offload {

void CompletionQueue::push(IoUnit* unit) {
  {
    std::lock_guard lock(mu_);
    finished_.push_back(unit);
  }
  cv_.notify_one();
}

void CompletionQueue::push(const std::vector<IoUnit*>& units) {
  if (units.empty()) return;
  {
    std::lock_guard lock(mu_);
    finished_.insert(finished_.end(), units.begin(), units.end());
  }
  cv_.notify_one();
}

std::size_t CompletionQueue::take(std::size_t minEvents, std::chrono::milliseconds timeout,
                                  std::vector<IoUnit*>& done) {
  std::unique_lock lock(mu_);
  // Waits for the engine's workers to finish `minEvents` units, or for wake() (new work).
  cv_.wait_for(lock, timeout, [&] { return finished_.size() >= minEvents || woken_; });
  woken_ = false;
  const std::size_t n = finished_.size();
  done.insert(done.end(), finished_.begin(), finished_.end());
  finished_.clear();
  return n;
}

void CompletionQueue::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

}  // namespace zrt::offload
