#include "offload/fault_injecting_engine.h"

#include "core/error.h"

namespace zrt::offload {

FaultInjectingEngine::FaultInjectingEngine(std::unique_ptr<IoEngine> inner, FaultHook hook)
    : inner_(std::move(inner)), hook_(std::move(hook)) {
  ZRT_ENFORCE(inner_ != nullptr && hook_ != nullptr);
}

QueueResult FaultInjectingEngine::queue(IoUnit& unit) {
  const std::optional<Fault> fault = hook_(unit, sequence_++);
  if (fault && fault->kind == Fault::Kind::Fail) {
    ZRT_ENFORCE(fault->error > 0, "an injected failure needs a positive errno");
    ++failures_;
    unit.result = -fault->error;
    return QueueResult::Completed;
  }
  const bool shorten = fault && fault->kind == Fault::Kind::Short && fault->bytes < unit.len;
  const std::size_t realLen = unit.len;
  if (shorten) unit.len = fault->bytes;
  const QueueResult rc = inner_->queue(unit);
  if (rc == QueueResult::Busy) {
    // Not accepted: the caller queues it again later and the hook gets to decide again.
    unit.len = realLen;
    --sequence_;
    return rc;
  }
  if (shorten) {
    ++shorts_;
    if (rc == QueueResult::Queued) shortened_[&unit] = realLen;
    else unit.len = realLen;
  }
  return rc;
}

void FaultInjectingEngine::reap(std::size_t minEvents, std::chrono::milliseconds timeout,
                                std::vector<IoUnit*>& done) {
  const std::size_t first = done.size();
  inner_->reap(minEvents, timeout, done);
  for (std::size_t i = first; i < done.size(); ++i) {
    if (auto it = shortened_.find(done[i]); it != shortened_.end()) {
      done[i]->len = it->second;
      shortened_.erase(it);
    }
  }
}

}  // namespace zrt::offload
