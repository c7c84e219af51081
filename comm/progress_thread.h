// ProgressThread: runs a communicator's operations one at a time, in posting order, on a
// dedicated thread, so the thread that posted them keeps computing while they progress (the
// MPI backend's "real progress"). It numbers operations (1, 2, ... per communicator), times
// them into CommStats, completes their Work, and publishes what is in flight for the watchdog.
// Thread-safety: every method may be called from any thread. The runner runs on the progress
// thread, or on a caller's thread inside runBlocking(), never two operations at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/collective.h"
#include "comm/comm_stats.h"
#include "comm/work.h"

namespace zrt::comm {

class ProgressThread {
 public:
  // Runs one operation to completion or throws; `seq` is its number on this communicator.
  using Runner = std::function<void(const Collective& op, std::uint64_t seq)>;

  // `inlineBlocking`: whether runBlocking may run an operation on the caller's thread.
  ProgressThread(std::string name, Runner runner, CommStats& stats, bool inlineBlocking = true);
  // Runs what is queued to the end first: queued operations reference live buffers and peers
  // expect them.
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Queues `op` (already validated) and returns its handle; `path` names the algorithm in the
  // description ("mpi", "shm", ...), may be empty.
  Work enqueue(Collective op, std::string_view path);
  // For a blocking call: when nothing is queued or running, runs `op` on the calling thread
  // (numbered, timed and watched like a queued one) and saves the two thread hand-offs; else
  // queues it and waits. Rethrows the operation's failure.
  void runBlocking(Collective op, std::string_view path);

  struct Snapshot {
    std::uint64_t issued = 0;     // operations posted
    std::uint64_t started = 0;    // operations the thread began
    std::uint64_t completed = 0;  // operations finished (ok or failed)
    bool running = false;         // an operation is in flight
    OpKind kind = OpKind::Barrier;
    std::uint64_t bytes = 0;
    std::shared_ptr<WorkState> work;  // its description(): "allReduce #3 (4.00 KiB fp32, path shm)"
    std::chrono::steady_clock::time_point since{};
  };
  Snapshot snapshot() const;
  // This progress thread's number in the process (0, 1, ... in order of construction): the same
  // on every rank for communicators made collectively in the same order.
  int lane() const { return lane_; }
  // Operations posted on lane `lane` of this process; nullopt when no such lane is alive.
  static std::optional<std::uint64_t> issuedOn(int lane);
  // The operation running now and how long it has run (nothing running: running = false).
  InFlight inFlight() const;
  // Fails the operation in flight and those queued behind it with `error` (their waits rethrow
  // it; the queued ones never run) and every later one at once: the operation in flight is
  // blocked for good (a lost peer) and this thread is abandoned in it. The waits on the
  // abandoned operation's handle return although it may still use its buffers. After it, the
  // owner must not destroy this object (the thread still uses it): it leaks it.
  void abandon(std::exception_ptr error);
  bool abandoned() const;
  // Set before the first enqueue: called when a wait on one of its operations times out (the
  // Python package abandons the communicator then, as after a lost peer).
  void setOnWaitTimeout(std::function<void(const std::string&)> hook) { onWaitTimeout_ = std::move(hook); }
  // Blocks until everything queued so far has run (the destructor of an owner calls it while the
  // watchdog still watches). No timeout of its own: each operation is under the watchdog's.
  void drain();

 private:
  struct Item {
    Collective op;
    std::shared_ptr<WorkState> state;
    std::uint64_t seq;
  };
  void run();
  std::shared_ptr<WorkState> makeState(const Collective& op, std::uint64_t seq, std::string_view path);
  // Runs an item whose start was recorded in snap_; `lock` is held on entry and exit.
  void execute(Item& item, std::unique_lock<std::mutex>& lock);
  void markStarted(const Item& item);  // under mu_

  const std::string name_;
  const int lane_;
  Runner runner_;
  CommStats& stats_;
  mutable std::mutex mu_;
  std::condition_variable cv_;      // work for the thread
  std::condition_variable idleCv_;  // an operation finished (drain)
  std::deque<Item> queue_;
  bool stop_ = false;
  const bool inlineBlocking_;
  std::exception_ptr abandoned_;  // abandon()'s error
  std::function<void(const std::string&)> onWaitTimeout_;
  Snapshot snap_;
  std::thread thread_;  // Last: starts once the members it uses exist.
};

}  // namespace zrt::comm
