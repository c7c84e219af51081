// The engine's live figures (EngineStats' queue fields, which the metrics endpoint serves):
// transfers in flight now and at most, requests outstanding and the oldest one's wait, read while
// a transfer is held back by a hook that blocks its ring, and again once everything finished.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "offload/aligned_buffer.h"
#include "offload/fault_injecting_engine.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"

using namespace zrt::offload;
using zrt::offload::test::TempDir;

namespace {

constexpr std::size_t kBlock = 64 * 1024;

// Blocks the ring thread on the first unit it queues until open() is called.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool open = false;

  std::optional<Fault> hold() {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    return std::nullopt;
  }
  void waitEntered() {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered; }));
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("stats report the transfers in flight, their maximum and the oldest outstanding request") {
  TempDir dir;
  Gate gate;
  AioOptions o;
  o.engine = EngineKind::ThreadPool;
  o.block_size = kBlock;
  o.queue_depth = 4;
  o.intra_op_parallelism = 1;
  o.wrap_engine = [&gate](std::unique_ptr<IoEngine> e, int) -> std::unique_ptr<IoEngine> {
    return std::make_unique<FaultInjectingEngine>(
        std::move(e), [&gate](const IoUnit&, std::uint64_t seq) -> std::optional<Fault> {
          return seq == 0 ? gate.hold() : std::nullopt;
        });
  };
  OffloadEngine engine(o);
  auto opts = engine.fileOptions();
  opts.create = true;
  auto file = engine.open({dir.path() / "data"}, opts);

  EngineStats idle = engine.stats();
  CHECK(idle.transfersInFlight == 0);
  CHECK(idle.requestsOutstanding == 0);
  CHECK(idle.oldestRequestSeconds == 0);

  // One write of three blocks: the ring takes all three pieces (4 free slots), then its engine's
  // first queue() blocks in the hook, so the three stay in flight.
  AlignedBuffer buf(3 * kBlock);
  std::memset(buf.data(), 7, buf.size());
  const auto before = std::chrono::steady_clock::now();
  IoHandle h = engine.write(file, 0, buf.data(), buf.size());
  gate.waitEntered();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const EngineStats held = engine.stats();
  const double bound = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  CHECK(held.transfersInFlight == 3);
  CHECK(held.maxTransfersInFlight == 3);
  CHECK(held.requestsOutstanding == 1);
  CHECK(held.oldestRequestDir == IoDir::Write);
  CHECK(held.oldestRequestSeconds >= 0.05);
  CHECK(held.oldestRequestSeconds <= bound);
  CHECK(held.bytesWritten == 0);

  gate.release();
  h.wait();
  // The request is retired just after its handle completes: poll briefly.
  EngineStats done = engine.stats();
  for (int i = 0; i < 3000 && done.requestsOutstanding != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    done = engine.stats();
  }
  CHECK(done.transfersInFlight == 0);
  CHECK(done.maxTransfersInFlight == 3);
  CHECK(done.requestsOutstanding == 0);
  CHECK(done.oldestRequestSeconds == 0);
  CHECK(done.bytesWritten == 3 * kBlock);

  engine.resetStats();
  CHECK(engine.stats().maxTransfersInFlight == 0);
  engine.readSync(file, 0, buf.data(), kBlock);
  CHECK(engine.stats().maxTransfersInFlight == 1);
  CHECK(engine.stats().bytesRead == kBlock);
}
