#include "offload/thread_pool_engine.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>

#include "offload/self_completing_engine.h"

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

class ThreadPoolEngine final : public SelfCompletingEngine {
 public:
  explicit ThreadPoolEngine(std::size_t depth)
      : SelfCompletingEngine(depth), pool_(std::min(depth, kMaxPoolThreads)) {}
  // Joins the pool: units still running finish first (they push into the base's completions,
  // which therefore outlive the pool).
  ~ThreadPoolEngine() override { pool_.join(); }
  ThreadPoolEngine(const ThreadPoolEngine&) = delete;
  ThreadPoolEngine& operator=(const ThreadPoolEngine&) = delete;

  std::string_view name() const override { return "threads"; }

 private:
  void start(const std::vector<IoUnit*>& units) override {
    for (IoUnit* unit : units) {
      boost::asio::post(pool_, [this, unit] {
        unit->result = transferOnce(*unit);
        completions().push(unit);
      });
    }
  }

  boost::asio::thread_pool pool_;
};

}  // namespace

std::unique_ptr<IoEngine> makeThreadPoolEngine(std::size_t depth) {
  return std::make_unique<ThreadPoolEngine>(depth);
}

}  // namespace zrt::offload
