#include "comm/progress_thread.h"

#include <pthread.h>

#include <map>

#include "comm/caller_label.h"
#include "core/error.h"
#include "core/timing.h"
#include "core/units.h"

namespace zrt::comm {
namespace {

// The same failure with what failed in front ("allReduce #3 (4.00 KiB fp32, path mpi): ..."),
// as the same exception type, so a waiter can still catch TimeoutError or PeerError.
std::exception_ptr naming(std::exception_ptr error, WorkState& state) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    const std::string text = detail::cat(state.description(), ": ", e.what());
    try {
      throw;
    } catch (const TimeoutError&) {
      return std::make_exception_ptr(TimeoutError(text));
    } catch (const PeerError&) {
      return std::make_exception_ptr(PeerError(text));
    } catch (const InvalidArgument&) {
      return std::make_exception_ptr(InvalidArgument(text));
    } catch (const ExternalError&) {
      return std::make_exception_ptr(ExternalError(text));
    } catch (const OutOfMemory&) {
      return std::make_exception_ptr(OutOfMemory(text));
    } catch (const IoError& io) {
      return std::make_exception_ptr(IoError(text, io.errnum()));
    } catch (...) {
      return std::make_exception_ptr(Error(text));
    }
  } catch (...) {
    return error;  // not ZRT's: passed on unchanged
  }
}

}  // namespace

namespace {
std::mutex g_lanesMu;
std::map<int, const ProgressThread*> g_lanes;
int g_nextLane = 0;

int registerLane(const ProgressThread* thread) {
  std::lock_guard lock(g_lanesMu);
  g_lanes[g_nextLane] = thread;
  return g_nextLane++;
}
}  // namespace

std::optional<std::uint64_t> ProgressThread::issuedOn(int lane) {
  std::lock_guard lock(g_lanesMu);
  const auto it = g_lanes.find(lane);
  if (it == g_lanes.end()) return std::nullopt;
  return it->second->snapshot().issued;
}

ProgressThread::ProgressThread(std::string name, Runner runner, CommStats& stats, bool inlineBlocking)
    : name_(std::move(name)),
      lane_(registerLane(this)),
      runner_(std::move(runner)),
      stats_(stats),
      inlineBlocking_(inlineBlocking),
      thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard lock(g_lanesMu);
    g_lanes.erase(lane_);
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<WorkState> ProgressThread::makeState(const Collective& op, std::uint64_t seq,
                                                     std::string_view path) {
  // `path` names a static string; the text is built only if someone asks for it.
  const OpKind kind = op.kind;
  const DType dtype = op.dtype;
  const std::uint64_t bytes = opBytes(op);
  auto state = std::make_shared<WorkState>([kind, dtype, bytes, seq, path]() -> std::string {
    std::string text = detail::cat(nameOf(kind), " #", seq, " (");
    if (kind != OpKind::Barrier) text += detail::cat(formatBytes(bytes), " ", nameOf(dtype), ", ");
    return text + detail::cat("path ", path.empty() ? "-" : path, ")");
  });
  state->setCaller(CallerLabel::current());
  state->setOrigin(lane_, seq);
  if (onWaitTimeout_) state->setOnTimeout(onWaitTimeout_);
  return state;
}

Work ProgressThread::enqueue(Collective op, std::string_view path) {
  std::lock_guard lock(mu_);
  const std::uint64_t seq = ++snap_.issued;
  auto state = makeState(op, seq, path);
  if (abandoned_) {
    state->finish(naming(abandoned_, *state));
    return Work(state);
  }
  queue_.push_back(Item{std::move(op), state, seq});
  cv_.notify_all();
  return Work(state);
}

void ProgressThread::runBlocking(Collective op, std::string_view path) {
  std::unique_lock lock(mu_);
  if (!inlineBlocking_ || abandoned_ || !queue_.empty() || snap_.running) {
    lock.unlock();
    enqueue(std::move(op), path).wait();
    return;
  }
  const std::uint64_t seq = ++snap_.issued;
  auto state = makeState(op, seq, path);
  Item item{std::move(op), std::move(state), seq};
  markStarted(item);
  const CallerLabel::Blocked blocked(lane_, seq);  // mu_ before the label's lock, as in makeState
  execute(item, lock);
  lock.unlock();
  Work(item.state).wait();
}

ProgressThread::Snapshot ProgressThread::snapshot() const {
  std::lock_guard lock(mu_);
  return snap_;
}

InFlight ProgressThread::inFlight() const {
  std::lock_guard lock(mu_);
  if (!snap_.running) return {};
  return {true, snap_.kind,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - snap_.since).count()};
}

void ProgressThread::abandon(std::exception_ptr error) {
  std::deque<Item> queued;
  std::shared_ptr<WorkState> running;
  {
    std::lock_guard lock(mu_);
    if (abandoned_) return;
    abandoned_ = error;
    queued.swap(queue_);
    if (snap_.running) running = snap_.work;
  }
  // Outside mu_: finish() wakes waiters, which may take mu_ to post again.
  if (running) running->finish(error);  // the report names the operation it was lost in
  for (Item& item : queued) item.state->finish(naming(error, *item.state));
  idleCv_.notify_all();
}

bool ProgressThread::abandoned() const {
  std::lock_guard lock(mu_);
  return abandoned_ != nullptr;
}

void ProgressThread::drain() {
  std::unique_lock lock(mu_);
  // Waits for the queue to empty and the last operation to finish (execute() notifies).
  idleCv_.wait(lock, [&] { return abandoned_ || (queue_.empty() && !snap_.running); });
}

void ProgressThread::markStarted(const Item& item) {
  snap_.started = item.seq;
  snap_.running = true;
  snap_.kind = item.op.kind;
  snap_.bytes = opBytes(item.op);
  snap_.work = item.state;
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
  const double seconds = secondsSince(t0);
  if (!error) stats_.record(item.op.kind, opBytes(item.op), seconds);
  item.state->finish(error ? naming(error, *item.state) : nullptr);
  lock.lock();
  snap_.completed = item.seq;
  snap_.running = false;
  idleCv_.notify_all();  // drain() may be waiting
  // The thread waits while an inline operation runs; wake it only if work arrived meanwhile
  // (a needless wake-up costs a context switch per small blocking call).
  if (!queue_.empty()) cv_.notify_all();
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
