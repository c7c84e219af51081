#include "comm/progress_thread.h"

#include <pthread.h>

#include "runtime/error.h"

namespace zrt::comm {

ProgressThread::ProgressThread(std::string name, Runner runner, CommStats& stats)
    : name_(std::move(name)), runner_(std::move(runner)), stats_(stats), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Work ProgressThread::enqueue(Collective op, std::string_view path) {
  std::lock_guard lock(mu_);
  const std::uint64_t seq = ++snap_.issued;
  std::string text = detail::cat(nameOf(op.kind), " #", seq, " (");
  if (op.kind != OpKind::Barrier) text += describe(op).substr(nameOf(op.kind).size() + 1) + ", ";
  text += detail::cat("path ", path.empty() ? "-" : path, ")");
  auto state = std::make_shared<WorkState>(std::move(text));
  queue_.push_back(Item{std::move(op), state, seq});
  cv_.notify_all();
  return Work(state);
}

ProgressThread::Snapshot ProgressThread::snapshot() const {
  std::lock_guard lock(mu_);
  return snap_;
}

void ProgressThread::run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  std::unique_lock lock(mu_);
  for (;;) {
    // Waits for an operation or for the destructor, which stops only an empty queue.
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    snap_.started = item.seq;
    snap_.running = true;
    snap_.kind = item.op.kind;
    snap_.bytes = opBytes(item.op);
    snap_.description = item.state->description();
    snap_.since = std::chrono::steady_clock::now();
    lock.unlock();

    std::exception_ptr error;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      runner_(item.op, item.seq);
    } catch (...) {
      error = std::current_exception();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!error) stats_.record(item.op.kind, opBytes(item.op), seconds);

    lock.lock();
    snap_.completed = item.seq;
    snap_.running = false;
    lock.unlock();
    item.state->finish(error);
    lock.lock();
  }
}

}  // namespace zrt::comm
