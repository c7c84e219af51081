#include "offload/null_engine.h"

#include "offload/completion_queue.h"

namespace zrt::offload {
namespace {

class NullEngine final : public IoEngine {
 public:
  explicit NullEngine(std::size_t depth) : depth_(depth) {}

  std::string_view name() const override { return "null"; }
  std::size_t depth() const override { return depth_; }

  QueueResult queue(IoUnit& unit) override {
    if (outstanding_ >= depth_) return QueueResult::Busy;
    staged_.push_back(&unit);
    ++outstanding_;
    return QueueResult::Queued;
  }

  void commit() override {
    for (IoUnit* unit : staged_) unit->result = static_cast<std::int64_t>(unit->len);
    completed_.push(staged_);
    staged_.clear();
  }

  void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
            std::vector<IoUnit*>& done) override {
    // Everything committed is already finished: a wait here ends only on wake() or the timeout.
    outstanding_ -= completed_.take(minEvents, timeout, done);
  }

  void wake() override { completed_.wake(); }

 private:
  std::size_t depth_;
  std::vector<IoUnit*> staged_;  // driving thread only
  std::size_t outstanding_ = 0;  // queued or finished, not yet reaped; driving thread only
  CompletionQueue completed_;
};

}  // namespace

std::unique_ptr<IoEngine> makeNullEngine(std::size_t depth) {
  return std::make_unique<NullEngine>(depth);
}

}  // namespace zrt::offload
