#include "offload/null_engine.h"

namespace zrt::offload {

QueueResult NullEngine::queue(IoUnit& unit) {
  if (staged_.size() + finished_.size() >= depth_) return QueueResult::Busy;
  staged_.push_back(&unit);
  return QueueResult::Queued;
}

void NullEngine::commit() {
  for (IoUnit* unit : staged_) {
    unit->result = static_cast<std::int64_t>(unit->len);
    finished_.push_back(unit);
  }
  staged_.clear();
}

void NullEngine::reap(std::size_t minEvents, std::chrono::milliseconds timeout,
                      std::vector<IoUnit*>& done) {
  if (finished_.size() < minEvents) {
    std::unique_lock lock(mu_);
    // Nothing committed can finish later; only a wake-up or the timeout ends this wait.
    cv_.wait_for(lock, timeout, [&] { return woken_; });
    woken_ = false;
  }
  done.insert(done.end(), finished_.begin(), finished_.end());
  finished_.clear();
}

void NullEngine::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

}  // namespace zrt::offload
