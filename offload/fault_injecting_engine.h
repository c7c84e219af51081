// FaultInjectingEngine: wraps another engine and, for units a hook picks, either fails them
// with a chosen errno (without doing any I/O: queue() answers Completed) or makes them come
// back short (only the first `bytes` are really transferred, so the caller must resubmit the
// rest). Tests use it to prove errors surface and short transfers are finished.
// Thread-safety: as IoEngine. The hook is called from the thread driving this engine; when one
// hook is shared by several engines (one per ring) it must be thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include "offload/io_engine.h"

namespace zrt::offload {

struct Fault {
  enum class Kind { Fail, Short };
  Kind kind = Kind::Fail;
  int error = 0;          // Fail: the errno the unit completes with
  std::size_t bytes = 0;  // Short: how many bytes really move (less than the unit's length)

  static Fault fail(int errnum) { return {Kind::Fail, errnum, 0}; }
  static Fault shortTransfer(std::size_t bytes) { return {Kind::Short, 0, bytes}; }
};

// Called for every unit queued; `sequence` numbers them 0, 1, ... per engine.
using FaultHook = std::function<std::optional<Fault>(const IoUnit& unit, std::uint64_t sequence)>;

class FaultInjectingEngine final : public IoEngine {
 public:
  FaultInjectingEngine(std::unique_ptr<IoEngine> inner, FaultHook hook);

  std::string_view name() const override { return inner_->name(); }
  std::size_t depth() const override { return inner_->depth(); }
  int registerBuffers(std::span<const iovec> buffers) override {
    return inner_->registerBuffers(buffers);
  }
  void prepare(IoUnit& unit) override { inner_->prepare(unit); }
  QueueResult queue(IoUnit& unit) override;
  void commit() override { inner_->commit(); }
  void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
            std::vector<IoUnit*>& done) override;
  void wake() override { inner_->wake(); }

  std::uint64_t failuresInjected() const { return failures_; }
  std::uint64_t shortsInjected() const { return shorts_; }

 private:
  std::unique_ptr<IoEngine> inner_;
  FaultHook hook_;
  std::uint64_t sequence_ = 0;
  std::uint64_t failures_ = 0;
  std::uint64_t shorts_ = 0;
  std::unordered_map<IoUnit*, std::size_t> shortened_;  // unit -> its real length
};

}  // namespace zrt::offload
