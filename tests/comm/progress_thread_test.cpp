// ProgressThread::inFlight, what the live metrics serve as the oldest wait: nothing before an
// operation, the running operation's kind and a growing time while it runs, nothing after.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/progress_thread.h"

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
