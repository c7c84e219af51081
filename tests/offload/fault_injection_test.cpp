// Fault injection through FaultInjectingEngine: a chosen transfer fails with a chosen errno
// (the request fails naming file, offset, length and the errno text; other requests are not
// touched; the engine keeps working), comes back short (the rest is resubmitted and every byte
// lands), or answers EAGAIN (retried). Both the io_uring and thread-pool engines underneath.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/fault_injecting_engine.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::TempDir;

namespace {

constexpr std::size_t kBlock = 64 * 1024;

AioOptions withHook(EngineKind kind, DirectIo direct, int rings, FaultHook hook) {
  AioOptions o;
  o.engine = kind;
  o.direct = direct;
  o.block_size = kBlock;
  o.queue_depth = 4;
  o.intra_op_parallelism = rings;
  o.wrap_engine = [hook](std::unique_ptr<IoEngine> e, int) -> std::unique_ptr<IoEngine> {
    return std::make_unique<FaultInjectingEngine>(std::move(e), hook);
  };
  return o;
}

std::shared_ptr<OffloadFile> create(OffloadEngine& engine, const TempDir& dir) {
  auto opts = engine.fileOptions();
  opts.create = true;
  return engine.open({dir.path() / "data"}, opts);
}

}  // namespace

TEST_CASE("a failed transfer fails its request with file, offset, length and errno text") {
  for (EngineKind kind : {EngineKind::IoUring, EngineKind::ThreadPool}) {
    CAPTURE(nameOf(kind));
    TempDir dir;
    // Fail the write transfer that starts at file offset 3 blocks, once, with EIO.
    std::atomic<int> injected{0};
    auto hook = [&](const IoUnit& u, std::uint64_t) -> std::optional<Fault> {
      if (u.dir == IoDir::Write && u.offset == 3 * kBlock && injected.fetch_add(1) == 0)
        return Fault::fail(EIO);
      return std::nullopt;
    };
    OffloadEngine engine(withHook(kind, DirectIo::Auto, 2, hook));
    auto file = create(engine, dir);
    AlignedBuffer a(8 * kBlock), b(8 * kBlock);
    fillPattern(a.data(), a.size(), 1);
    fillPattern(b.data(), b.size(), 2);
    auto bad = engine.write(file, 0, a.data(), a.size());
    auto good = engine.write(file, 16 * kBlock, b.data(), b.size());
    try {
      bad.wait();
      FAIL("the write with an injected EIO reported success");
    } catch (const zrt::IoError& e) {
      const std::string what = e.what();
      CHECK(e.errnum() == EIO);
      CHECK(what.find(std::strerror(EIO)) != std::string::npos);
      CHECK(what.find((dir.path() / "data").string()) != std::string::npos);
      CHECK(what.find("at offset " + std::to_string(3 * kBlock)) != std::string::npos);
      CHECK(what.find(std::to_string(kBlock) + " bytes") != std::string::npos);
    }
    CHECK(bad.error() != nullptr);
    good.wait();  // the other request is untouched
    AlignedBuffer back(8 * kBlock);
    engine.readSync(file, 16 * kBlock, back.data(), back.size());
    CHECK(firstMismatch(back.data(), back.size(), 2) == -1);
    // The engine keeps working: the same write now succeeds.
    engine.writeSync(file, 0, a.data(), a.size());
    engine.readSync(file, 0, back.data(), back.size());
    CHECK(firstMismatch(back.data(), back.size(), 1) == -1);
    CHECK(engine.stats().failures == 1);
  }
}

TEST_CASE("ENOSPC, EFBIG and any other errno reach the waiter unchanged") {
  for (int err : {ENOSPC, EFBIG, EIO, EBADF, EROFS}) {
    CAPTURE(err);
    TempDir dir;
    auto hook = [err](const IoUnit& u, std::uint64_t) -> std::optional<Fault> {
      if (u.offset == kBlock) return Fault::fail(err);
      return std::nullopt;
    };
    OffloadEngine engine(withHook(EngineKind::IoUring, DirectIo::Auto, 1, hook));
    auto file = create(engine, dir);
    AlignedBuffer a(4 * kBlock);
    auto h = engine.write(file, 0, a.data(), a.size());
    CHECK_THROWS_WITH_AS(h.wait(), doctest::Contains(std::strerror(err)), zrt::IoError);
    try {
      h.wait();
    } catch (const zrt::IoError& e) {
      CHECK(e.errnum() == err);
    }
  }
}

TEST_CASE("a failed read reports the error and never success") {
  TempDir dir;
  auto hook = [](const IoUnit& u, std::uint64_t) -> std::optional<Fault> {
    if (u.dir == IoDir::Read && u.offset == 2 * kBlock) return Fault::fail(EIO);
    return std::nullopt;
  };
  OffloadEngine engine(withHook(EngineKind::IoUring, DirectIo::Auto, 2, hook));
  auto file = create(engine, dir);
  AlignedBuffer a(6 * kBlock);
  engine.writeSync(file, 0, a.data(), a.size());
  CHECK_THROWS_AS(engine.readSync(file, 0, a.data(), a.size()), zrt::IoError);
}

TEST_CASE("short transfers are resubmitted for the rest and every byte lands") {
  struct Case {
    EngineKind kind;
    DirectIo direct;
    std::size_t cut;  // bytes a shortened transfer really moves
  };
  // O_DIRECT transfers come back short in whole blocks; buffered ones at any byte.
  for (const Case& c : {Case{EngineKind::IoUring, DirectIo::Auto, 4096},
                        Case{EngineKind::IoUring, DirectIo::Off, 777},
                        Case{EngineKind::ThreadPool, DirectIo::Auto, 8192},
                        Case{EngineKind::ThreadPool, DirectIo::Off, 1}}) {
    CAPTURE(nameOf(c.kind));
    CAPTURE(c.cut);
    TempDir dir;
    // Every third transfer (by sequence) comes back short: first attempts and resubmissions.
    auto hook = [cut = c.cut](const IoUnit& u, std::uint64_t seq) -> std::optional<Fault> {
      if (seq % 3 == 0 && u.len > cut) return Fault::shortTransfer(cut);
      return std::nullopt;
    };
    OffloadEngine engine(withHook(c.kind, c.direct, 2, hook));
    auto file = create(engine, dir);
    std::mt19937_64 rng(5);
    std::vector<AlignedBuffer> src;
    std::vector<std::pair<std::uint64_t, std::size_t>> where;
    std::vector<IoHandle> hs;
    std::uint64_t at = 0;
    for (int i = 0; i < 12; ++i) {
      const std::size_t len = 1 + rng() % (5 * kBlock);
      src.emplace_back(len);
      fillPattern(src.back().data(), len, 100 + i);
      hs.push_back(engine.write(file, at, src.back().data(), len));
      where.emplace_back(at, len);
      at += alignUp(len, 4096);
    }
    waitAll(hs);
    for (int i = 0; i < 12; ++i) {
      AlignedBuffer back(where[i].second);
      engine.readSync(file, where[i].first, back.data(), where[i].second);
      CHECK(firstMismatch(back.data(), where[i].second, 100 + i) == -1);
    }
    const EngineStats s = engine.stats();
    CHECK(s.shortResubmits > 0);
    CHECK(s.failures == 0);
  }
}

TEST_CASE("EAGAIN and EINTR are retried, then succeed") {
  TempDir dir;
  std::atomic<int> count{0};
  auto hook = [&](const IoUnit&, std::uint64_t seq) -> std::optional<Fault> {
    if (seq % 2 == 0 && count.fetch_add(1) < 20) return Fault::fail(seq % 4 == 0 ? EAGAIN : EINTR);
    return std::nullopt;
  };
  OffloadEngine engine(withHook(EngineKind::IoUring, DirectIo::Auto, 1, hook));
  auto file = create(engine, dir);
  AlignedBuffer a(10 * kBlock), b(10 * kBlock);
  fillPattern(a.data(), a.size(), 77);
  engine.writeSync(file, 0, a.data(), a.size());
  engine.readSync(file, 0, b.data(), b.size());
  CHECK(firstMismatch(b.data(), b.size(), 77) == -1);
  CHECK(engine.stats().retries >= 10);
}

TEST_CASE("an endless EAGAIN gives up with an error instead of spinning") {
  TempDir dir;
  auto hook = [](const IoUnit&, std::uint64_t) -> std::optional<Fault> {
    return Fault::fail(EAGAIN);
  };
  OffloadEngine engine(withHook(EngineKind::IoUring, DirectIo::Auto, 1, hook));
  auto file = create(engine, dir);
  AlignedBuffer a(kBlock);
  CHECK_THROWS_WITH_AS(engine.writeSync(file, 0, a.data(), a.size()),
                       doctest::Contains(std::strerror(EAGAIN)), zrt::IoError);
}

TEST_CASE("random faults over many outstanding requests: failures and successes are exact") {
  TempDir dir;
  // Each write transfer fails with probability 1/16, decided by its offset so it can be known.
  auto failsAt = [](std::uint64_t offset) { return (offset / kBlock * 2654435761u) % 16 == 5; };
  auto hook = [&](const IoUnit& u, std::uint64_t) -> std::optional<Fault> {
    if (u.dir == IoDir::Write && failsAt(u.offset)) return Fault::fail(EIO);
    return std::nullopt;
  };
  OffloadEngine engine(withHook(EngineKind::IoUring, DirectIo::Auto, 3, hook));
  auto file = create(engine, dir);
  constexpr int kRequests = 40;
  constexpr std::size_t kLen = 4 * kBlock;
  std::vector<AlignedBuffer> bufs;
  std::vector<IoHandle> hs;
  for (int i = 0; i < kRequests; ++i) {
    bufs.emplace_back(kLen);
    fillPattern(bufs.back().data(), kLen, 1000 + i);
    hs.push_back(engine.write(file, i * kLen, bufs.back().data(), kLen));
  }
  int failed = 0;
  for (int i = 0; i < kRequests; ++i) {
    bool expectFail = false;
    for (std::size_t b = 0; b < kLen / kBlock; ++b) expectFail |= failsAt(i * kLen + b * kBlock);
    CAPTURE(i);
    if (expectFail) {
      CHECK_THROWS_AS(hs[i].wait(), zrt::IoError);
      ++failed;
    } else {
      CHECK_NOTHROW(hs[i].wait());
      AlignedBuffer back(kLen);
      engine.readSync(file, i * kLen, back.data(), kLen);
      CHECK(firstMismatch(back.data(), kLen, 1000 + i) == -1);
    }
  }
  CHECK(failed > 0);
  CHECK(failed < kRequests);
}
