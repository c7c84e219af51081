// Small pieces on their own: the latency histogram against exact percentiles of known samples,
// aio options from the config section and their validation, alignment helpers, the null
// engine driving the whole framework (splitting, scheduling, completion) without a disk.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "offload/aio_options.h"
#include "offload/aligned_buffer.h"
#include "offload/completion_queue.h"
#include "offload/latency_histogram.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"
#include "core/config/config.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::TempDir;

TEST_CASE("histogram percentiles are within 1/16 of the exact ones") {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(12.0, 1.5);  // around 160 us, long tail
  std::vector<std::uint64_t> samples;
  LatencyHistogram h;
  for (int i = 0; i < 20000; ++i) {
    const auto v = static_cast<std::uint64_t>(dist(rng));
    samples.push_back(v);
    h.record(v);
  }
  std::sort(samples.begin(), samples.end());
  for (double q : {0.01, 0.5, 0.9, 0.99, 0.999}) {
    CAPTURE(q);
    const auto exact = static_cast<double>(
        samples[static_cast<std::size_t>(std::ceil(q * samples.size())) - 1]);
    const auto approx = static_cast<double>(h.percentileNanos(q));
    CHECK(std::abs(approx - exact) <= exact / 16 + 1);
  }
  CHECK(h.count() == 20000);
  CHECK(h.maxNanos() == samples.back());
  CHECK(h.percentileNanos(1.0) == samples.back());
  LatencyHistogram empty;
  CHECK(empty.percentileNanos(0.5) == 0);
  for (std::uint64_t v : {0ull, 1ull, 15ull, 16ull, 17ull, 1ull << 40, ~0ull}) {
    LatencyHistogram one;
    one.record(v);
    CHECK(one.percentileNanos(0.5) <= v);
    CHECK(one.percentileNanos(0.5) >= v - v / 16);
  }
  LatencyHistogram merged;
  merged.merge(h);
  merged.merge(h);
  CHECK(merged.count() == 40000);
  CHECK(merged.percentileNanos(0.5) == h.percentileNanos(0.5));
}

TEST_CASE("aio options come from the config section and are validated") {
  zrt::AioConfig c;
  c.block_size = 8 << 20;
  c.queue_depth = 32;
  c.intra_op_parallelism = 4;
  c.single_submit = true;
  AioOptions o = aioOptionsFrom(c);
  CHECK(o.block_size == 8u << 20);
  CHECK(o.queue_depth == 32);
  CHECK(o.intra_op_parallelism == 4);
  CHECK(o.single_submit);
  c.block_size = 1000;
  CHECK_THROWS_WITH_AS(aioOptionsFrom(c), doctest::Contains("aio.block_size"), zrt::InvalidArgument);
  c.block_size = 1 << 20;
  c.queue_depth = 0;
  CHECK_THROWS_WITH_AS(aioOptionsFrom(c), doctest::Contains("aio.queue_depth"), zrt::InvalidArgument);
  c.queue_depth = 8;
  c.intra_op_parallelism = 0;
  CHECK_THROWS_WITH_AS(aioOptionsFrom(c), doctest::Contains("intra_op_parallelism"),
                       zrt::InvalidArgument);
  CHECK(parseEngineKind("io_uring") == EngineKind::IoUring);
  CHECK(parseEngineKind("threads") == EngineKind::ThreadPool);
  CHECK_THROWS_AS(parseEngineKind("libaio"), zrt::InvalidArgument);
  CHECK(parseDirectIo("off") == DirectIo::Off);
  CHECK_THROWS_AS(parseDirectIo("sometimes"), zrt::InvalidArgument);
}

TEST_CASE("options from a parsed config file's aio section") {
  const zrt::Config cfg = zrt::parseConfig(
      R"({"train_batch_size": 4, "aio": {"block_size": "256K", "queue_depth": 16,
          "thread_count": 3, "single_submit": true, "overlap_events": false}})",
      "<test>", 1);
  const AioOptions o = aioOptionsFrom(cfg.aio);
  CHECK(o.block_size == 256 * 1024);
  CHECK(o.queue_depth == 16);
  CHECK(o.intra_op_parallelism == 3);
  CHECK(o.single_submit);
  CHECK_FALSE(o.overlap_events);
}

TEST_CASE("the largest queue depth the config accepts gives a working (clamped) ring") {
  TempDir dir;
  AioOptions o;
  o.queue_depth = 32768;
  o.block_size = 4096;
  // io_uring clamps its ring; the thread pool caps its threads (32768 of them would not start).
  for (EngineKind kind : {EngineKind::Auto, EngineKind::ThreadPool}) {
    CAPTURE(nameOf(kind));
    o.engine = kind;
    OffloadEngine engine(o);
    auto opts = engine.fileOptions();
    opts.create = true;
    auto file = engine.open({dir.path() / "f"}, opts);
    AlignedBuffer a(1 << 20), b(1 << 20);
    zrt::offload::test::fillPattern(a.data(), a.size(), 2);
    engine.writeSync(file, 0, a.data(), a.size());
    engine.readSync(file, 0, b.data(), b.size());
    CHECK(zrt::offload::test::firstMismatch(b.data(), b.size(), 2) == -1);
  }
  o.queue_depth = 32769;
  CHECK_THROWS_AS(validate(o), zrt::InvalidArgument);
}

TEST_CASE("alignment helpers and aligned buffers") {
  CHECK(alignUp(0, 4096) == 0);
  CHECK(alignUp(1, 4096) == 4096);
  CHECK(alignUp(4096, 4096) == 4096);
  CHECK(alignDown(8191, 4096) == 4096);
  AlignedBuffer b(5000, 512);
  CHECK(b.size() == 5120);
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 512 == 0);
  AlignedBuffer moved = std::move(b);
  CHECK_FALSE(b);
  CHECK(moved.size() == 5120);
  CHECK_FALSE(AlignedBuffer(0));
}

TEST_CASE("a completion queue hands over units pushed by other threads, wakes and times out") {
  CompletionQueue q;
  IoUnit units[3];
  std::vector<IoUnit*> done;
  // Nothing queued and no wake-up: the wait ends at the timeout with nothing.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(q.take(1, std::chrono::milliseconds(20), done) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(20));
  CHECK(done.empty());
  // Units pushed from another thread, one by one and as a batch, end a wait for all three.
  std::thread pusher([&] {
    q.push(&units[0]);
    q.push(std::vector<IoUnit*>{&units[1], &units[2]});
  });
  std::size_t got = 0;
  while (got < 3) got += q.take(3 - got, std::chrono::seconds(10), done);
  pusher.join();
  CHECK(got == 3);
  REQUIRE(done.size() == 3);
  CHECK(done[0] == &units[0]);
  CHECK(done[2] == &units[2]);
  // A wake-up ends a wait early, once: the next take waits again.
  q.wake();
  CHECK(q.take(1, std::chrono::seconds(10), done) == 0);
  CHECK(q.take(0, std::chrono::milliseconds(1), done) == 0);
  CHECK(done.size() == 3);
}

TEST_CASE("the null engine drives splitting, scheduling and completion without a disk") {
  TempDir dir;
  AioOptions o;
  o.engine = EngineKind::Null;
  o.block_size = 4096;
  o.queue_depth = 3;
  o.intra_op_parallelism = 4;
  OffloadEngine engine(o);
  CHECK(engine.kind() == EngineKind::Null);
  auto opts = engine.fileOptions();
  opts.create = true;
  auto file = engine.open({dir.path() / "f"}, opts);
  // All in flight at once: the writes share one source, each read lands in a buffer of its own
  // (reads into one buffer would be concurrent writes to it, a data race ThreadSanitizer sees).
  constexpr std::size_t kSlot = 17 * 4096;
  AlignedBuffer source(kSlot), sinks(100 * kSlot);
  std::vector<IoHandle> hs;
  std::uint64_t bytes = 0;
  for (int i = 0; i < 200; ++i) {
    const std::size_t len = 4096 * static_cast<std::size_t>(i % 17) + static_cast<std::size_t>(i % 5);
    hs.push_back(i % 2 ? engine.write(file, 0, source.data(), len)
                       : engine.read(file, 0, sinks.data() + static_cast<std::size_t>(i / 2) * kSlot, len));
    bytes += len;
  }
  waitAll(hs);
  const EngineStats s = engine.stats();
  CHECK(s.bytesRead + s.bytesWritten == bytes);
  CHECK(s.failures == 0);
  // Transfers: one per started 4 KiB block of each request, tails included.
  std::uint64_t transfers = 0;
  for (int i = 0; i < 200; ++i) transfers += static_cast<std::uint64_t>(i % 17) + (i % 5 ? 1 : 0);
  CHECK(s.transfers == transfers);
}

TEST_CASE("wait() on a request that cannot finish in time says what it waited for") {
  TempDir dir;
  AioOptions o;
  o.engine = EngineKind::ThreadPool;
  o.block_size = 4096;
  o.queue_depth = 1;
  std::atomic<bool> release{false};
  // An engine whose first transfer is held back until the test lets it go.
  o.wrap_engine = [&](std::unique_ptr<IoEngine> e, int) -> std::unique_ptr<IoEngine> {
    struct Slow final : IoEngine {
      std::unique_ptr<IoEngine> inner;
      std::atomic<bool>* release;
      std::string_view name() const override { return "slow"; }
      std::size_t depth() const override { return inner->depth(); }
      QueueResult queue(IoUnit& u) override {
        while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return inner->queue(u);
      }
      void commit() override { inner->commit(); }
      void reap(std::size_t m, std::chrono::milliseconds t, std::vector<IoUnit*>& d) override {
        inner->reap(m, t, d);
      }
      void wake() override { inner->wake(); }
    };
    auto s = std::make_unique<Slow>();
    s->inner = std::move(e);
    s->release = &release;
    return s;
  };
  OffloadEngine engine(o);
  auto opts = engine.fileOptions();
  opts.create = true;
  auto file = engine.open({dir.path() / "f"}, opts);
  AlignedBuffer buf(8192);
  auto h = engine.write(file, 0, buf.data(), 8192);
  CHECK_FALSE(h.poll());
  // The operation, its bytes, the file and offset, and the time waited (docs/operations.md).
  const std::string what = zrt::detail::cat("waited 0.03 s for write of 8.00 KiB (8192 bytes) at offset 0 of ",
                                       file->name(), ": 0 of 8192 bytes done");
  CHECK_THROWS_WITH_AS(h.wait(std::chrono::milliseconds(30)), doctest::Contains(what.c_str()), zrt::TimeoutError);
  release = true;
  h.wait();
  CHECK(h.poll());
}
