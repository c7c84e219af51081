#include "offload/thread_pool_engine.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>

#include "offload/completion_queue.h"

namespace zrt::offload {
namespace {

// More blocking pread/pwrite threads than this buys no bandwidth, only memory and scheduling:
// a queue depth above it (the config accepts up to 32768) queues the rest in the pool.
constexpr std::size_t kMaxPoolThreads = 256;

// One system call, as an io_uring read or write is: a short count goes back to the caller.
std::int64_t transferOnce(const IoUnit& unit) {
  for (;;) {
    const ssize_t rc =
        unit.dir == IoDir::Read
            ? ::pread(unit.fd, unit.buf, unit.len, static_cast<off_t>(unit.offset))
            : ::pwrite(unit.fd, unit.buf, unit.len, static_cast<off_t>(unit.offset));
    if (rc >= 0) return rc;
    if (errno != EINTR) return -errno;
  }
}

class ThreadPoolEngine final : public IoEngine {
 public:
  explicit ThreadPoolEngine(std::size_t depth)
      : depth_(depth), pool_(std::min(depth, kMaxPoolThreads)) {}
  // Joins the pool: units still running finish first (they write into completed_).
  ~ThreadPoolEngine() override { pool_.join(); }
  ThreadPoolEngine(const ThreadPoolEngine&) = delete;
  ThreadPoolEngine& operator=(const ThreadPoolEngine&) = delete;

  std::string_view name() const override { return "threads"; }
  std::size_t depth() const override { return depth_; }

  QueueResult queue(IoUnit& unit) override {
    if (outstanding_ >= depth_) return QueueResult::Busy;
    staged_.push_back(&unit);
    ++outstanding_;
    return QueueResult::Queued;
  }

  void commit() override {
    for (IoUnit* unit : staged_) {
      boost::asio::post(pool_, [this, unit] {
        unit->result = transferOnce(*unit);
        completed_.push(unit);
      });
    }
    staged_.clear();
  }

  void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
            std::vector<IoUnit*>& done) override {
    outstanding_ -= completed_.take(minEvents, timeout, done);
  }

  void wake() override { completed_.wake(); }

 private:
  std::size_t depth_;
  CompletionQueue completed_;  // filled by the pool threads; declared before the pool, so it
                               // outlives the pool's threads however the engine is destroyed
  boost::asio::thread_pool pool_;
  std::vector<IoUnit*> staged_;  // queued, not committed; driving thread only
  std::size_t outstanding_ = 0;  // driving thread only
};

}  // namespace

std::unique_ptr<IoEngine> makeThreadPoolEngine(std::size_t depth) {
  return std::make_unique<ThreadPoolEngine>(depth);
}

}  // namespace zrt::offload
