// ProgressThread::inFlight, what the live metrics serve as the oldest wait: nothing before an
// operation, the running operation's kind and a growing time while it runs, nothing after.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/progress_thread.h"
#include "core/error.h"

using namespace zrt;
using namespace zrt::comm;

TEST_CASE("inFlight names the running operation and how long it has run") {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  CommStats stats(2);
  ProgressThread progress(
      "test",
      [&](const Collective&, std::uint64_t) {
        std::unique_lock lock(mu);
        entered = true;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
      },
      stats);
  CHECK_FALSE(progress.inFlight().running);

  std::vector<float> buf(4);
  const auto before = std::chrono::steady_clock::now();
  Work w = progress.enqueue(allReduceOp(buf.data(), buf.data(), buf.size(), DType::F32), "test");
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered; }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const InFlight now = progress.inFlight();
  const double bound = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  CHECK(now.running);
  CHECK(now.kind == OpKind::AllReduce);
  CHECK(now.seconds >= 0.03);
  CHECK(now.seconds <= bound);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  w.wait();
  progress.drain();
  CHECK_FALSE(progress.inFlight().running);
  CHECK(progress.inFlight().seconds == 0);
}

// abandon(): what a lost peer does in raise mode (comm/mpi/peer_loss.h). The operation in flight
// stays blocked in its runner, yet its wait, the waits of the operations queued behind it and
// every later post fail with the error; the queued ones never run; blocking calls do not run
// inline (the caller could not be woken) when inlineBlocking is off.
TEST_CASE("abandon fails the operation in flight, the queued ones and later ones") {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;
  bool release = false;
  CommStats stats(2);
  std::optional<ProgressThread> progress;
  progress.emplace(
      "test",
      [&](const Collective&, std::uint64_t) {
        std::unique_lock lock(mu);
        ++entered;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
      },
      stats, /*inlineBlocking=*/false);
  std::vector<float> buf(4);
  const auto op = [&] { return allReduceOp(buf.data(), buf.data(), buf.size(), DType::F32); };
  Work running = progress->enqueue(op(), "test");
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered == 1; }));
  }
  Work queued = progress->enqueue(op(), "test");
  CHECK_FALSE(progress->abandoned());
  progress->abandon(std::make_exception_ptr(PeerError("peer lost: rank 1 (pid 42) exited")));
  CHECK(progress->abandoned());
  CHECK(running.isCompleted());
  CHECK(queued.isCompleted());
  CHECK_THROWS_WITH_AS(running.wait(), "peer lost: rank 1 (pid 42) exited", PeerError);
  CHECK_THROWS_WITH_AS(queued.wait(), doctest::Contains("allReduce #2"), PeerError);
  CHECK_THROWS_WITH_AS(queued.wait(), doctest::Contains("peer lost: rank 1"), PeerError);
  CHECK_THROWS_AS(progress->enqueue(op(), "test").wait(), PeerError);
  CHECK_THROWS_AS(progress->runBlocking(op(), "test"), PeerError);
  progress->drain();  // returns: nothing will run any more
  {
    std::lock_guard lock(mu);
    release = true;  // the runner returns (a real one would not), so the thread can be joined
  }
  cv.notify_all();
  progress.reset();  // joins the thread, which would have run anything still queued
  CHECK(entered == 1);  // the queued and later operations never ran
}
