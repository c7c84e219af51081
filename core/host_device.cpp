#include "core/host_device.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace zrt {
namespace {

constexpr std::size_t kAlignment = 4096;

double seconds(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

// A copy-engine thread: runs queued tasks in order. Tasks keep running after one fails (the
// first error is kept and rethrown by synchronize), so event markers queued later still fire
// and nobody waiting on them hangs.
class HostStream final : public Stream {
 public:
  HostStream() : worker_([this] { run(); }) {}

  ~HostStream() override {
    {
      std::unique_lock lock(mu_);
      stop_ = true;
    }
    workCv_.notify_one();
    worker_.join();  // Drains the queue first: queued work may still reference live memory.
  }

  void enqueue(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(task));
      ++queued_;
    }
    workCv_.notify_one();
  }

  void synchronize(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    const std::uint64_t target = queued_;
    // Waits for the worker to finish every task queued before this call.
    if (!doneCv_.wait_for(lock, timeout, [&] { return done_ >= target; })) {
      ZRT_THROW(TimeoutError, "host stream synchronize: ", target - done_, " of ", target,
                " queued tasks still unfinished after ", seconds(timeout), " s");
    }
    if (error_) std::rethrow_exception(error_);
  }

  void waitEvent(Event& event) override;

  void* native() const override { return nullptr; }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      // Waits for work or for the destructor; the destructor only stops an empty queue.
      workCv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr err;
      try {
        task();
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err && !error_) error_ = err;
      ++done_;
      doneCv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable workCv_;
  std::condition_variable doneCv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t queued_ = 0;
  std::uint64_t done_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread worker_;  // Last: starts after the members it uses exist.
};

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;
  std::uint64_t completed = 0;
};

class HostEvent final : public Event {
 public:
  void record(Stream& stream) override {
    auto& hs = dynamic_cast<HostStream&>(stream);
    std::uint64_t target;
    {
      std::lock_guard lock(state_->mu);
      target = ++state_->recorded;
    }
    hs.enqueue([state = state_, target] {
      std::lock_guard lock(state->mu);
      if (target > state->completed) state->completed = target;
      state->cv.notify_all();
    });
  }

  bool query() override {
    std::lock_guard lock(state_->mu);
    return state_->completed >= state_->recorded;
  }

  void wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(state_->mu);
    const std::uint64_t target = state_->recorded;
    // Waits for the stream to reach the point of the latest record().
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->completed >= target; })) {
      ZRT_THROW(TimeoutError, "host event: recorded work not finished after ", seconds(timeout),
                " s");
    }
  }

  std::shared_ptr<EventState> state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_ = std::make_shared<EventState>();
};

void HostStream::waitEvent(Event& event) {
  auto state = dynamic_cast<HostEvent&>(event).state();
  std::uint64_t target;
  {
    std::lock_guard lock(state->mu);
    target = state->recorded;
  }
  const auto timeout = defaultWaitTimeout();
  enqueue([state, target, timeout] {
    std::unique_lock lock(state->mu);
    // Holds this stream until the other stream passes the recorded point.
    if (!state->cv.wait_for(lock, timeout, [&] { return state->completed >= target; })) {
      ZRT_THROW(TimeoutError, "host stream waitEvent: the event's stream did not reach the "
                              "recorded point within ", seconds(timeout), " s");
    }
  });
}

HostStream& hostStream(Stream& stream) {
  auto* hs = dynamic_cast<HostStream*>(&stream);
  ZRT_ENFORCE(hs != nullptr, "a stream from another device was passed to the host device");
  return *hs;
}

}  // namespace

HostDevice::HostDevice(MemoryLedger& ledger, std::uint64_t capacityBytes)
    : Device(ledger), capacity_(capacityBytes) {}

std::unique_ptr<Stream> HostDevice::createStream() { return std::make_unique<HostStream>(); }
std::unique_ptr<Event> HostDevice::createEvent() { return std::make_unique<HostEvent>(); }

// A zero-byte copy or memset may come with null pointers (an empty allocation has none), which
// memcpy and memset must not be given even for zero bytes (UBSan's nonnull check).
void HostDevice::copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) {
  hostStream(stream).enqueue([=] {
    if (bytes) std::memcpy(dst, src, bytes);
  });
}

void HostDevice::memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) {
  hostStream(stream).enqueue([=] {
    if (bytes) std::memset(dst, value, bytes);
  });
}

void HostDevice::hostCallback(Stream& stream, std::function<void()> fn) {
  hostStream(stream).enqueue(std::move(fn));
}

void* HostDevice::rawAllocate(std::size_t bytes) {
  std::uint64_t before = used_.fetch_add(bytes);
  if (before + bytes > capacity_) {
    used_.fetch_sub(bytes);
    throwOutOfMemory(bytes, "device", before, capacity_);
  }
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, bytes) != 0) {
    used_.fetch_sub(bytes);
    ZRT_THROW(OutOfMemory, "host device: the host itself could not provide ",
              formatBytes(bytes), " for simulated device memory\n", ledger().table());
  }
  return p;
}

void HostDevice::rawFree(void* ptr, std::size_t bytes) noexcept {
  std::free(ptr);
  used_.fetch_sub(bytes);
}

void* HostDevice::rawAllocatePinned(std::size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, bytes) != 0) {
    ZRT_THROW(OutOfMemory, "host device: could not allocate ", formatBytes(bytes),
              " of pinned host memory\n", ledger().table());
  }
  if (mlock(p, bytes) != 0) {
    int err = errno;
    std::free(p);
    rlimit lim{};
    getrlimit(RLIMIT_MEMLOCK, &lim);
    ZRT_THROW(OutOfMemory, "host device: mlock of ", formatBytes(bytes),
              " pinned host memory failed: ", std::strerror(err), " (RLIMIT_MEMLOCK is ",
              lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : formatBytes(lim.rlim_cur),
              "; raise it with `ulimit -l` or lower buffer_count/buffer_size)\n",
              ledger().table());
  }
  return p;
}

void HostDevice::rawFreePinned(void* ptr, std::size_t bytes) noexcept {
  munlock(ptr, bytes);
  std::free(ptr);
}

}  // namespace zrt
