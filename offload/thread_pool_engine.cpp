#include "offload/thread_pool_engine.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <algorithm>
#include <cerrno>

#include "offload/completion_queue.h"

namespace zrt::offload {
namespace {

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

}  // namespace

// More blocking pread/pwrite threads than this buys no bandwidth, only memory and scheduling:
// a queue depth above it (the config accepts up to 32768) queues the rest in the pool.
constexpr std::size_t kMaxPoolThreads = 256;

struct ThreadPoolEngine::Impl {
  explicit Impl(std::size_t d) : depth(d), pool(std::min(d, kMaxPoolThreads)) {}

  std::size_t depth;
  boost::asio::thread_pool pool;
  std::vector<IoUnit*> staged;  // queued, not committed; driving thread only
  std::size_t outstanding = 0;  // driving thread only
  CompletionQueue completed;    // filled by the pool threads
};

ThreadPoolEngine::ThreadPoolEngine(std::size_t depth) : impl_(std::make_unique<Impl>(depth)) {}

ThreadPoolEngine::~ThreadPoolEngine() { impl_->pool.join(); }

std::size_t ThreadPoolEngine::depth() const { return impl_->depth; }

QueueResult ThreadPoolEngine::queue(IoUnit& unit) {
  if (impl_->outstanding >= impl_->depth) return QueueResult::Busy;
  impl_->staged.push_back(&unit);
  ++impl_->outstanding;
  return QueueResult::Queued;
}

void ThreadPoolEngine::commit() {
  Impl* impl = impl_.get();
  for (IoUnit* unit : impl->staged) {
    boost::asio::post(impl->pool, [impl, unit] {
      unit->result = transferOnce(*unit);
      impl->completed.push(unit);
    });
  }
  impl->staged.clear();
}

void ThreadPoolEngine::reap(std::size_t minEvents, std::chrono::milliseconds timeout,
                            std::vector<IoUnit*>& done) {
  impl_->outstanding -= impl_->completed.take(minEvents, timeout, done);
}

void ThreadPoolEngine::wake() { impl_->completed.wake(); }

}  // namespace zrt::offload
