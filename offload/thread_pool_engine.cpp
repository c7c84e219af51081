#include "offload/thread_pool_engine.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <condition_variable>
#include <mutex>

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

struct ThreadPoolEngine::Impl {
  explicit Impl(std::size_t d) : depth(d), pool(d) {}

  std::size_t depth;
  boost::asio::thread_pool pool;
  std::vector<IoUnit*> staged;  // queued, not committed; driving thread only
  std::size_t outstanding = 0;  // driving thread only
  std::mutex mu;
  std::condition_variable cv;
  std::vector<IoUnit*> finished;  // guarded by mu
  bool woken = false;             // guarded by mu
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
      {
        std::lock_guard lock(impl->mu);
        impl->finished.push_back(unit);
      }
      impl->cv.notify_one();
    });
  }
  impl->staged.clear();
}

void ThreadPoolEngine::reap(std::size_t minEvents, std::chrono::milliseconds timeout,
                            std::vector<IoUnit*>& done) {
  std::unique_lock lock(impl_->mu);
  // Waits for pool threads to finish `minEvents` units, or for wake().
  impl_->cv.wait_for(lock, timeout,
                     [&] { return impl_->finished.size() >= minEvents || impl_->woken; });
  impl_->woken = false;
  impl_->outstanding -= impl_->finished.size();
  done.insert(done.end(), impl_->finished.begin(), impl_->finished.end());
  impl_->finished.clear();
}

void ThreadPoolEngine::wake() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->woken = true;
  }
  impl_->cv.notify_one();
}

}  // namespace zrt::offload
