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

std::shared_ptr<WorkState> ProgressThread::makeState(const Collective& op, std::uint64_t seq,
                                                     std::string_view path) {
  std::string text = detail::cat(nameOf(op.kind), " #", seq, " (");
  if (op.kind != OpKind::Barrier) text += describe(op).substr(nameOf(op.kind).size() + 1) + ", ";
  text += detail::cat("path ", path.empty() ? "-" : path, ")");
  return std::make_shared<WorkState>(std::move(text));
}

Work ProgressThread::enqueue(Collective op, std::string_view path) {
  std::lock_guard lock(mu_);
  const std::uint64_t seq = ++snap_.issued;
  auto state = makeState(op, seq, path);
  queue_.push_back(Item{std::move(op), state, seq});
  cv_.notify_all();
  return Work(state);
}

void ProgressThread::runBlocking(Collective op, std::string_view path) {
  std::unique_lock lock(mu_);
  if (!queue_.empty() || snap_.running) {
    lock.unlock();
    enqueue(std::move(op), path).wait();
    return;
  }
  const std::uint64_t seq = ++snap_.issued;
  auto state = makeState(op, seq, path);
  Item item{std::move(op), std::move(state), seq};
  markStarted(item);
  execute(item, lock);
  lock.unlock();
  Work(item.state).wait();
}

ProgressThread::Snapshot ProgressThread::snapshot() const {
  std::lock_guard lock(mu_);
  return snap_;
}

void ProgressThread::drain() {
  std::unique_lock lock(mu_);
  // Waits for the queue to empty and the last operation to finish (execute() notifies).
  cv_.wait(lock, [&] { return queue_.empty() && !snap_.running; });
}

void ProgressThread::markStarted(const Item& item) {
  snap_.started = item.seq;
  snap_.running = true;
  snap_.kind = item.op.kind;
  snap_.bytes = opBytes(item.op);
  snap_.description = item.state->description();
  snap_.since = std::chrono::steady_clock::now();
}

void ProgressThread::execute(Item& item, std::unique_lock<std::mutex>& lock) {
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
  item.state->finish(error);
  lock.lock();
  snap_.completed = item.seq;
  snap_.running = false;
  cv_.notify_all();  // a blocking caller may be waiting for the thread to go idle
}

void ProgressThread::run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  std::unique_lock lock(mu_);
  for (;;) {
    // Waits for an operation or for the destructor, which stops only an empty queue; an
    // operation running inline on a caller's thread keeps this one waiting (order).
    cv_.wait(lock, [&] { return (stop_ || !queue_.empty()) && !snap_.running; });
    if (queue_.empty()) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    markStarted(item);
    execute(item, lock);
  }
}

}  // namespace zrt::comm
