// UringEngine: the io_uring I/O engine. One ring of `depth` units plus one slot for a wake-up
// read on an eventfd, so another thread can interrupt a blocked reap (new work arrived).
// Rings are set up single-issuer with deferred task running where the kernel has them (6.1+):
// completions are then processed only when the owning thread waits, which is all it does.
// Registered (fixed) buffers skip pinning pages for every O_DIRECT transfer.
// Thread-safety: as IoEngine; create and drive it from one thread (single-issuer rings insist).
#pragma once

#include <memory>

#include "offload/io_engine.h"

namespace zrt::offload {

class UringEngine final : public IoEngine {
 public:
  // Throws IoError (errnum set) when the kernel refuses the ring.
  explicit UringEngine(std::size_t depth);
  ~UringEngine() override;
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  // 0 when this process may use io_uring, else the errno the kernel answered (ENOSYS without
  // the syscall, EPERM when disabled by sysctl or a seccomp sandbox).
  static int probe();

  std::string_view name() const override { return "io_uring"; }
  std::size_t depth() const override;
  int registerBuffers(std::span<const iovec> buffers) override;
  void prepare(IoUnit& unit) override;
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
