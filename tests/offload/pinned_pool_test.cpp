// The pinned staging pool and its budget: the budget arithmetic on made-up limits (the
// memlock limit binds only memory that mlock or io_uring registration charges to it, and not
// with CAP_IPC_LOCK; free memory always binds), a clear error naming what was asked and what
// is allowed, the pool's ledger charge, leases with a bounded wait, and pool buffers registered
// with the engine as fixed buffers carrying real I/O.
#include <doctest/doctest.h>

#include <thread>

#include "offload/offload_engine.h"
#include "offload/pinned_budget.h"
#include "offload/pinned_buffer_pool.h"
#include "offload_test_util.h"
#include "core/error.h"
#include "core/host_device.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::TempDir;

namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::uint64_t MiB = 1ull << 20;

PinnedLimits limits(std::optional<std::uint64_t> memlock, bool cap, std::uint64_t locked,
                    std::uint64_t available) {
  PinnedLimits l;
  l.memlock = memlock;
  l.capIpcLock = cap;
  l.lockedNow = locked;
  l.memAvailable = available;
  return l;
}

}  // namespace

TEST_CASE("the allowance is the tighter of RLIMIT_MEMLOCK and 90% of free memory") {
  // 64 KiB memlock, 1 GiB free: memlock binds for mlock'ed memory...
  auto a = pinnedAllowance(limits(64 * 1024, false, 0, GiB), true);
  CHECK(a.bytes == 64 * 1024);
  CHECK(a.reason.find("RLIMIT_MEMLOCK") != std::string::npos);
  // ...minus what is already locked...
  CHECK(pinnedAllowance(limits(64 * 1024, false, 16 * 1024, GiB), true).bytes == 48 * 1024);
  CHECK(pinnedAllowance(limits(64 * 1024, false, 80 * 1024, GiB), true).bytes == 0);
  // ...but not for cudaHostAlloc memory, nor with CAP_IPC_LOCK, nor when unlimited.
  CHECK(pinnedAllowance(limits(64 * 1024, false, 0, GiB), false).bytes == GiB * 9 / 10);
  CHECK(pinnedAllowance(limits(64 * 1024, true, 0, GiB), true).bytes == GiB * 9 / 10);
  CHECK(pinnedAllowance(limits(std::nullopt, false, 0, GiB), true).bytes == GiB * 9 / 10);
  // Free memory binds everyone.
  auto m = pinnedAllowance(limits(std::nullopt, true, 0, 10 * GiB), true);
  CHECK(m.bytes == 9 * GiB);
  CHECK(m.reason.find("MemAvailable") != std::string::npos);
}

TEST_CASE("going over the budget is an error that says what was asked and what is allowed") {
  CHECK_NOTHROW(checkPinnedBudget(32 * 1024, "x", limits(64 * 1024, false, 0, GiB), true));
  try {
    checkPinnedBudget(4 * MiB, "pinned swap buffers", limits(64 * 1024, false, 0, GiB), true);
    FAIL("no error");
  } catch (const zrt::OutOfMemory& e) {
    const std::string w = e.what();
    CHECK(w.find("pinned swap buffers") != std::string::npos);
    CHECK(w.find("4.00 MiB") != std::string::npos);
    CHECK(w.find("64.00 KiB") != std::string::npos);
    CHECK(w.find("ulimit -l") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(checkPinnedBudget(2 * GiB, "p", limits(std::nullopt, true, 0, GiB), true),
                       doctest::Contains("MemAvailable"), zrt::OutOfMemory);
}

TEST_CASE("this process's limits are read from the system") {
  const PinnedLimits l = readPinnedLimits();
  CHECK(l.memAvailable > 0);
}

TEST_CASE("the pool checks the budget before allocating anything") {
  zrt::MemoryLedger ledger;
  zrt::HostDevice device(ledger, GiB);
  CHECK_THROWS_AS(PinnedBufferPool(device, 4, MiB, limits(MiB, false, 0, GiB)), zrt::OutOfMemory);
  // A count x size that wraps 64 bits is refused as such, not checked as a small wrapped total.
  CHECK_THROWS_WITH_AS(PinnedBufferPool(device, 1 << 20, std::size_t{1} << 45, limits(GiB, false, 0, GiB)),
                       doctest::Contains("overflows 64 bits"), zrt::InvalidArgument);
  CHECK_THROWS_AS(PinnedBufferPool(device, 2, SIZE_MAX - 10, limits(GiB, false, 0, GiB)),
                  zrt::InvalidArgument);
  CHECK(ledger.total(zrt::MemPlace::PinnedHost).peak == 0);
}

TEST_CASE("pool buffers: ledger charge, leases and a bounded wait") {
  zrt::MemoryLedger ledger;
  zrt::HostDevice device(ledger, GiB);
  {
    PinnedBufferPool pool(device, 3, 100'000);  // rounded up to 4 KiB multiples
    CHECK(pool.bufferSize() == 102'400);
    CHECK(ledger.get(zrt::MemTag::SwapBuffers, zrt::MemPlace::PinnedHost).current == 3 * 102'400);
    auto a = pool.acquire();
    auto b = pool.acquire();
    auto c = pool.acquire();
    CHECK(pool.available() == 0);
    CHECK_FALSE(pool.tryAcquire().has_value());
    CHECK_THROWS_WITH_AS(pool.acquire(std::chrono::milliseconds(20)),
                         doctest::Contains("all 3 buffers"), zrt::TimeoutError);
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 4096 == 0);
    std::thread giver([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      b.release();
    });
    auto d = pool.acquire(std::chrono::seconds(10));  // gets b's buffer once given back
    giver.join();
    CHECK(d.index() != a.index());
    CHECK(d.index() != c.index());
  }
  CHECK(ledger.get(zrt::MemTag::SwapBuffers, zrt::MemPlace::PinnedHost).current == 0);
}

TEST_CASE("pinnedPoolBytes: what a pool charges, huge-page padding included") {
  // Below a huge page, or without huge pages: count x the 4 KiB-rounded size.
  CHECK(pinnedPoolBytes(3, 100'000, 0) == 3 * 102'400);
  CHECK(pinnedPoolBytes(3, 100'000, 2 * MiB) == 3 * 102'400);
  // 5,005,824 bytes -> 1,223 pages = 5,009,408; four of them 20,037,632 -> 10 huge pages of 2 MiB
  // (20 MiB), plus one huge page less 4 KiB for aligning the start: 23,064,576 bytes.
  CHECK(pinnedPoolBytes(4, 5'005'824, 2 * MiB) == 23'064'576);
  CHECK_THROWS_AS(pinnedPoolBytes(2, SIZE_MAX - 10, 0), zrt::InvalidArgument);
  // A real pool on the host device charges exactly that, on this machine's huge pages.
  zrt::MemoryLedger ledger;
  zrt::HostDevice device(ledger, GiB);
  const std::size_t huge = transparentHugePageBytes();
  CHECK(huge >= 4096);
  for (const std::size_t size : {std::size_t{100'000}, std::size_t{huge / 2 + 1}}) {
    CAPTURE(size);
    PinnedBufferPool pool(device, 3, size, limits(GiB, false, 0, 8 * GiB), /*registerWithUring=*/false);
    CHECK(ledger.get(zrt::MemTag::SwapBuffers, zrt::MemPlace::PinnedHost).current ==
          pinnedPoolBytes(3, size, huge));
  }
}

TEST_CASE("pool buffers registered as fixed buffers carry I/O (and without registration too)") {
  zrt::MemoryLedger ledger;
  zrt::HostDevice device(ledger, GiB);
  PinnedBufferPool pool(device, 4, 2 * MiB);
  for (bool fixed : {true, false}) {
    CAPTURE(fixed);
    TempDir dir;
    AioOptions o;
    o.block_size = 256 * 1024;
    o.intra_op_parallelism = 2;
    o.fixed_buffers = fixed;
    OffloadEngine engine(o, pool.iovecs());
    CHECK(engine.fixedBuffersActive() == fixed);
    CHECK(engine.describe().find(fixed ? "fixed buffers" : "no fixed buffers") !=
          std::string::npos);
    auto opts = engine.fileOptions();
    opts.create = true;
    auto file = engine.open({dir.path() / "f"}, opts);
    auto a = pool.acquire();
    auto b = pool.acquire();
    fillPattern(a.data(), a.size(), 12);
    engine.writeSync(file, 0, a.data(), a.size());
    // A read into part of a pool buffer (still inside the registered region) and a tail.
    engine.readSync(file, 0, b.data(), a.size() - 1000);
    CHECK(firstMismatch(b.data(), a.size() - 1000, 12) == -1);
  }
}
