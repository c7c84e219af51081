// ThreadPoolEngine: the fallback I/O engine for kernels or sandboxes without io_uring. Each
// committed unit runs as one pread/pwrite on a Boost.Asio thread pool of `depth` threads (at
// most 256), so that many transfers really are in flight at once.
// Thread-safety: as IoEngine (one driving thread; wake() from any thread).
#pragma once

#include <memory>

#include "offload/io_engine.h"

namespace zrt::offload {

class ThreadPoolEngine final : public IoEngine {
 public:
  explicit ThreadPoolEngine(std::size_t depth);
  // Joins the pool: units still running finish first.
  ~ThreadPoolEngine() override;
  ThreadPoolEngine(const ThreadPoolEngine&) = delete;
  ThreadPoolEngine& operator=(const ThreadPoolEngine&) = delete;

  std::string_view name() const override { return "threads"; }
  std::size_t depth() const override;
  QueueResult queue(IoUnit& unit) override;
  void commit() override;
  void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
            std::vector<IoUnit*>& done) override;
  void wake() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zrt::offload
