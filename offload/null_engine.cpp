#include "offload/null_engine.h"

namespace zrt::offload {

QueueResult NullEngine::queue(IoUnit& unit) {
  if (outstanding_ >= depth_) return QueueResult::Busy;
  staged_.push_back(&unit);
  ++outstanding_;
  return QueueResult::Queued;
}

void NullEngine::commit() {
  for (IoUnit* unit : staged_) unit->result = static_cast<std::int64_t>(unit->len);
  completed_.push(staged_);
  staged_.clear();
}

void NullEngine::reap(std::size_t minEvents, std::chrono::milliseconds timeout,
                      std::vector<IoUnit*>& done) {
  // Everything committed is already finished: a wait here ends only on wake() or the timeout.
  outstanding_ -= completed_.take(minEvents, timeout, done);
}

void NullEngine::wake() { completed_.wake(); }

}  // namespace zrt::offload
