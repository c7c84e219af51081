// NullEngine: moves no bytes and reports every unit as fully transferred, like fio's null
// engine. It measures and tests the framework above the engines (splitting, scheduling,
// completion) without a disk. Thread-safety: as IoEngine.
#pragma once

#include "offload/completion_queue.h"
#include "offload/io_engine.h"

namespace zrt::offload {

class NullEngine final : public IoEngine {
 public:
  explicit NullEngine(std::size_t depth) : depth_(depth) {}

  std::string_view name() const override { return "null"; }
  std::size_t depth() const override { return depth_; }
  QueueResult queue(IoUnit& unit) override;
  void commit() override;
  void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
            std::vector<IoUnit*>& done) override;
  void wake() override;

 private:
  std::size_t depth_;
  std::vector<IoUnit*> staged_;  // driving thread only
  std::size_t outstanding_ = 0;  // queued or finished, not yet reaped; driving thread only
  CompletionQueue completed_;
};

}  // namespace zrt::offload
