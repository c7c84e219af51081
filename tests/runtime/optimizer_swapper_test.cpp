// The NVMe optimizer swapper on its own (runtime/optimizer_swapper.h): every sub-group of every
// state file reaches the update exactly once per pass, holding what the previous pass wrote,
// for each buffer count, both pipeline settings and both I/O engines; an I/O failure names the
// file and offset and leaves no request in flight. The reference is the arithmetic itself:
// element i of state k starts at k·10⁶ + i (exact in fp32) and each pass adds 1.
// The order of operations is checked on the swapper's observer events: no read lands in a
// buffer before its write-back is done, each update sees its reads finished, the next read is
// issued the moment a write-back frees its region (so the disk is not left idle while the
// optimizer runs), and no more sub-groups are live than there are buffers. A read or write
// failing mid-pass, or an update that throws, stops the pass with nothing left in flight.
// The engine's ring threads and the caller share the pinned buffers, so this program is also
// what the ThreadSanitizer build runs for the swapper (docs/operations.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "core/host_device.h"
#include "core/memory_ledger.h"
#include "offload/fault_injecting_engine.h"
#include "offload/io_error.h"
#include "offload/offload_engine.h"
#include "offload/pinned_buffer_pool.h"
#include "offload/swap_space.h"
#include "runtime/optimizer_swapper.h"
#include "tests/offload/offload_test_util.h"

using namespace zrt;
using namespace zrt::offload;
using zrt::offload::test::TempDir;

namespace {

constexpr std::uint64_t kCount = 10'000;     // not a multiple of the sub-group: a short last one
constexpr std::uint64_t kSubGroup = 2'048;   // 5 sub-groups
constexpr std::size_t kStates = 3;           // master weights and two moments

float startValue(std::size_t k, std::uint64_t i) { return static_cast<float>(k * 1'000'000 + i); }

struct Rig {
  explicit Rig(AioOptions aio, int buffers)
      : device(ledger, std::uint64_t{1} << 30),
        pool(device, static_cast<std::size_t>(buffers),
             OptimizerSwapper::subGroupElements(kCount, kSubGroup) * 4 * kStates),
        io(aio, pool.iovecs()),
        space({dir.path()}, ledger, 0, "swapper-test") {
    FileOpenOptions o = io.fileOptions();
    for (std::size_t k = 0; k < kStates; ++k)
      files.push_back(space.create("state" + std::to_string(k), kCount * 4, MemTag::OptimizerState, o));
  }
  std::vector<const SwapFile*> filePointers() const {
    std::vector<const SwapFile*> out;
    for (const SwapFile& f : files) out.push_back(&f);
    return out;
  }
  TempDir dir{"zrt-swapper-test"};
  MemoryLedger ledger;
  HostDevice device;
  PinnedBufferPool pool;
  OffloadEngine io;
  SwapSpace space;
  std::vector<SwapFile> files;
};

}  // namespace

TEST_CASE("the pool holds the buffers a pass uses: one a sub-group, at most buffer_count") {
  // DeepSpeed's default sub_group_size (10^9) makes a shard one sub-group: one buffer, not four.
  CHECK(OptimizerSwapper::buffersUsed(5'000'000, 1'000'000'000, 4) == 1);
  CHECK(OptimizerSwapper::buffersUsed(5'000'000, 2'000'000, 4) == 3);  // groups of 2'000'896
  CHECK(OptimizerSwapper::buffersUsed(5'000'000, 1'000'000, 4) == 4);
  CHECK(OptimizerSwapper::buffersUsed(4096, 1024, 4) == 4);
  CHECK(OptimizerSwapper::buffersUsed(4097, 1024, 4) == 4);
  CHECK(OptimizerSwapper::buffersUsed(3000, 1024, 8) == 3);
  CHECK(OptimizerSwapper::buffersUsed(1, 1, 0) == 1);  // the swapper refuses 0; the size stays sane
}

TEST_CASE("every sub-group is updated once per pass and holds what the last pass wrote") {
  for (EngineKind engine : {EngineKind::Auto, EngineKind::ThreadPool}) {
    for (int buffers : {1, 2, 4}) {
      for (bool pipelineRead : {true, false}) {
        for (bool pipelineWrite : {true, false}) {
          CAPTURE(nameOf(engine));
          CAPTURE(buffers);
          CAPTURE(pipelineRead);
          CAPTURE(pipelineWrite);
          AioOptions aio;
          aio.engine = engine;
          aio.block_size = 4096;  // several transfers per sub-group
          aio.intra_op_parallelism = 2;
          Rig rig(aio, buffers);
          OptimizerSwapperOptions o;
          o.subGroupSize = kSubGroup;
          o.bufferCount = buffers;
          o.pipelineRead = pipelineRead;
          o.pipelineWrite = pipelineWrite;
          OptimizerSwapper swapper(rig.io, rig.pool, rig.filePointers(), kCount, o);
          REQUIRE(swapper.subGroups() == 5);

          std::vector<std::size_t> order;
          swapper.fill([&](const OptimizerSwapper::Window& w) {
            order.push_back(w.index);
            for (std::size_t k = 0; k < kStates; ++k)
              for (std::uint64_t j = 0; j < w.count; ++j) w.states[k][j] = startValue(k, w.begin + j);
          });
          CHECK(order == std::vector<std::size_t>{0, 1, 2, 3, 4});
          const int passes = 3;
          std::uint64_t wrong = 0;
          for (int pass = 0; pass < passes; ++pass) {
            order.clear();
            std::uint64_t seen = 0;
            swapper.forEach([&](const OptimizerSwapper::Window& w) {
              order.push_back(w.index);
              CHECK(w.begin == w.index * kSubGroup);
              CHECK(w.count == std::min(kSubGroup, kCount - w.begin));
              for (std::size_t k = 0; k < kStates; ++k)
                for (std::uint64_t j = 0; j < w.count; ++j) {
                  if (w.states[k][j] != startValue(k, w.begin + j) + static_cast<float>(pass)) ++wrong;
                  w.states[k][j] += 1.0f;
                }
              seen += w.count;
            });
            CHECK(order == std::vector<std::size_t>{0, 1, 2, 3, 4});
            CHECK(seen == kCount);
          }
          CHECK(wrong == 0);
          const OptimizerSwapper::Stats s = swapper.takeStats();
          CHECK(s.bytesRead == passes * kCount * 4 * kStates);
          CHECK(s.bytesWritten == (passes + 1) * kCount * 4 * kStates);
        }
      }
    }
  }
}

TEST_CASE("a failed transfer during a pass is an IoError naming the file and offset, with nothing left in flight") {
  AioOptions aio;
  aio.engine = EngineKind::ThreadPool;
  aio.block_size = 4096;
  // Transfer 40 fails with EIO: the fill wrote units 0-29, so it is one of the first pass.
  aio.wrap_engine = [](std::unique_ptr<IoEngine> e, int) -> std::unique_ptr<IoEngine> {
    return std::make_unique<FaultInjectingEngine>(
        std::move(e), [](const IoUnit&, std::uint64_t seq) -> std::optional<Fault> {
          if (seq == 40) return Fault::fail(EIO);
          return std::nullopt;
        });
  };
  Rig rig(aio, 3);
  OptimizerSwapperOptions o;
  o.subGroupSize = kSubGroup;
  o.bufferCount = 3;
  OptimizerSwapper swapper(rig.io, rig.pool, rig.filePointers(), kCount, o);
  swapper.fill([](const OptimizerSwapper::Window&) {});
  try {
    swapper.forEach([](const OptimizerSwapper::Window&) {});
    FAIL_CHECK("no error");
  } catch (const IoError& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("at offset") != std::string::npos, what);
    CHECK_MESSAGE(what.find("state") != std::string::npos, what);
    CHECK(e.errnum() == EIO);
  }
  // Every lease came back: nothing the engine still writes into is lent out.
  CHECK(rig.pool.available() == 3);
}

namespace {

using Kind = SwapEvent::Kind;

// The observer's log: I/O events are reported under the swapper's lock, so their order here is
// the order in which the swapper decided them.
struct EventLog {
  std::mutex mu;
  std::vector<SwapEvent> events;
  std::function<void(const SwapEvent&)> observer() {
    return [this](const SwapEvent& e) {
      std::lock_guard lock(mu);
      events.push_back(e);
    };
  }
  std::size_t find(Kind kind, std::size_t group, std::size_t state) const {
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i].kind == kind && events[i].group == group && events[i].state == state) return i;
    return events.size();
  }
};

bool isIo(Kind k) { return k != Kind::UpdateBegin && k != Kind::UpdateEnd; }

}  // namespace

TEST_CASE("the order of operations: buffers reused only after their write-back, reads chained to it") {
  for (int buffers : {1, 2, 3, 4, 6}) {
    for (bool pipelineRead : {true, false}) {
      for (bool pipelineWrite : {true, false}) {
        CAPTURE(buffers);
        CAPTURE(pipelineRead);
        CAPTURE(pipelineWrite);
        AioOptions aio;
        aio.engine = EngineKind::ThreadPool;
        aio.block_size = 4096;
        aio.intra_op_parallelism = 2;
        Rig rig(aio, buffers);
        EventLog log;
        OptimizerSwapperOptions o;
        o.subGroupSize = kSubGroup;
        o.bufferCount = buffers;
        o.pipelineRead = pipelineRead;
        o.pipelineWrite = pipelineWrite;
        o.observer = log.observer();
        OptimizerSwapper watched(rig.io, rig.pool, rig.filePointers(), kCount, o);
        watched.fill([](const OptimizerSwapper::Window&) {});
        {
          std::lock_guard lock(log.mu);
          log.events.clear();
        }
        // The update checks how many buffers are lent out while it runs.
        std::size_t mostLent = 0;
        watched.forEach([&](const OptimizerSwapper::Window&) {
          mostLent = std::max(mostLent, rig.pool.count() - rig.pool.available());
        });
        CHECK(mostLent <= static_cast<std::size_t>(buffers));
        CHECK(rig.pool.available() == static_cast<std::size_t>(buffers));

        std::lock_guard lock(log.mu);
        const auto& ev = log.events;
        const std::size_t groups = watched.subGroups();
        const std::size_t B = static_cast<std::size_t>(buffers);
        for (std::size_t g = 0; g < groups; ++g) {
          CAPTURE(g);
          const std::size_t begin = log.find(Kind::UpdateBegin, g, 0);
          const std::size_t end = log.find(Kind::UpdateEnd, g, 0);
          REQUIRE(begin < end);
          REQUIRE(end < ev.size());
          for (std::size_t k = 0; k < kStates; ++k) {
            CAPTURE(k);
            const std::size_t ri = log.find(Kind::ReadIssued, g, k);
            const std::size_t rd = log.find(Kind::ReadDone, g, k);
            const std::size_t wi = log.find(Kind::WriteIssued, g, k);
            const std::size_t wd = log.find(Kind::WriteDone, g, k);
            CHECK(ri < rd);
            CHECK(rd < begin);  // the update sees its states read
            CHECK(end < wi);    // and is written back after it
            CHECK(wi < wd);
            if (g >= B) {
              // The buffer region is reused only after the write-back of its last sub-group.
              CHECK(log.find(Kind::WriteDone, g - B, k) < ri);
            }
            if (!pipelineRead && g > 0) CHECK(log.find(Kind::UpdateEnd, g - 1, 0) < ri);
            if (!pipelineWrite && g + 1 < groups) CHECK(wd < log.find(Kind::UpdateBegin, g + 1, 0));
          }
        }
        // With pipeline_read, a finished write-back is followed at once (in the same step of
        // the swapper, before any other I/O decision) by the read of the slot's next sub-group.
        if (pipelineRead) {
          std::vector<SwapEvent> io;
          for (const SwapEvent& e : ev)
            if (isIo(e.kind)) io.push_back(e);
          for (std::size_t i = 0; i < io.size(); ++i) {
            if (io[i].kind != Kind::WriteDone || io[i].group + B >= groups) continue;
            CAPTURE(io[i].group);
            CAPTURE(io[i].state);
            REQUIRE(i + 1 < io.size());
            CHECK(io[i + 1].kind == Kind::ReadIssued);
            CHECK(io[i + 1].group == io[i].group + B);
            CHECK(io[i + 1].state == io[i].state);
          }
          // Before the first update, every buffer has a read in flight.
          const std::size_t first = log.find(Kind::UpdateBegin, 0, 0);
          for (std::size_t g = 0; g < std::min(B, groups); ++g)
            for (std::size_t k = 0; k < kStates; ++k) CHECK(log.find(Kind::ReadIssued, g, k) < first);
        }
        // For each state, never more sub-groups live (read issued, write-back not done) than
        // buffers: the pinned memory in use stays within buffer_count buffers.
        for (std::size_t k = 0; k < kStates; ++k) {
          std::set<std::size_t> live;
          std::size_t mostLive = 0;
          for (const SwapEvent& e : ev) {
            if (e.state != k) continue;
            if (e.kind == Kind::ReadIssued) live.insert(e.group);
            if (e.kind == Kind::WriteDone) live.erase(e.group);
            mostLive = std::max(mostLive, live.size());
          }
          CHECK(mostLive <= B);
        }
      }
    }
  }
}

namespace {

// Fails the first write (or read) transfer of sub-group `group` once armed; the fill's writes
// go through before it is armed.
struct MidPassFault {
  std::atomic<bool> armed{false};
  std::atomic<int> failed{0};
  IoDir dir = IoDir::Write;
  std::uint64_t group = 2;
  AioOptions options() {
    AioOptions aio;
    aio.engine = EngineKind::ThreadPool;
    aio.block_size = 4096;
    aio.intra_op_parallelism = 2;
    aio.wrap_engine = [this](std::unique_ptr<IoEngine> e, int) -> std::unique_ptr<IoEngine> {
      return std::make_unique<FaultInjectingEngine>(
          std::move(e), [this](const IoUnit& u, std::uint64_t) -> std::optional<Fault> {
            // Offsets within one state file: sub-group g is [g·S·4, (g+1)·S·4).
            if (armed && u.dir == dir && u.offset / (kSubGroup * 4) == group && failed.exchange(1) == 0)
              return Fault::fail(EIO);
            return std::nullopt;
          });
    };
    return aio;
  }
};

}  // namespace

TEST_CASE("a read or a write failing mid-pass stops the pass: the first error, nothing issued after, nothing in flight") {
  for (IoDir dir : {IoDir::Read, IoDir::Write}) {
    for (int buffers : {1, 2, 4}) {
      CAPTURE(nameOf(dir));
      CAPTURE(buffers);
      MidPassFault fault;
      fault.dir = dir;
      Rig rig(fault.options(), buffers);
      EventLog log;
      OptimizerSwapperOptions o;
      o.subGroupSize = kSubGroup;
      o.bufferCount = buffers;
      o.observer = log.observer();
      OptimizerSwapper swapper(rig.io, rig.pool, rig.filePointers(), kCount, o);
      swapper.fill([](const OptimizerSwapper::Window&) {});
      {
        std::lock_guard lock(log.mu);
        log.events.clear();
      }
      fault.armed = true;
      std::vector<std::size_t> updated;
      try {
        swapper.forEach([&](const OptimizerSwapper::Window& w) { updated.push_back(w.index); });
        FAIL_CHECK("no error");
      } catch (const IoError& e) {
        const std::string what = e.what();
        CHECK_MESSAGE(what.find(nameOf(dir)) != std::string::npos, what);
        CHECK_MESSAGE(what.find("at offset") != std::string::npos, what);
        CHECK(e.errnum() == EIO);
      }
      CHECK(fault.failed == 1);
      CHECK(rig.pool.available() == static_cast<std::size_t>(buffers));
      // A sub-group whose read failed never reaches the update.
      if (dir == IoDir::Read)
        for (std::size_t g : updated) CHECK(g < 2);
      std::vector<SwapEvent> ev;
      {
        std::lock_guard lock(log.mu);
        ev.swap(log.events);
      }
      std::size_t failedAt = ev.size();
      for (std::size_t i = 0; i < ev.size(); ++i)
        if (ev[i].failed) {
          failedAt = i;
          break;
        }
      REQUIRE(failedAt < ev.size());
      // After the failure nothing new is issued, and everything issued finishes.
      std::size_t issued = 0, finished = 0;
      for (std::size_t i = 0; i < ev.size(); ++i) {
        const Kind k = ev[i].kind;
        if (k == Kind::ReadIssued || k == Kind::WriteIssued) {
          ++issued;
          CHECK_MESSAGE(i < failedAt, "issued after the failure: event ", i);
        }
        if (k == Kind::ReadDone || k == Kind::WriteDone) ++finished;
      }
      CHECK(issued == finished);
      // The swapper still works for the next pass once the fault is gone.
      swapper.forEach([](const OptimizerSwapper::Window&) {});
    }
  }
}

TEST_CASE("an update that throws stops the pass with nothing in flight; its exception reaches the caller") {
  AioOptions aio;
  aio.engine = EngineKind::ThreadPool;
  aio.block_size = 4096;
  Rig rig(aio, 3);
  OptimizerSwapperOptions o;
  o.subGroupSize = kSubGroup;
  o.bufferCount = 3;
  OptimizerSwapper swapper(rig.io, rig.pool, rig.filePointers(), kCount, o);
  swapper.fill([](const OptimizerSwapper::Window&) {});
  CHECK_THROWS_WITH_AS(swapper.forEach([](const OptimizerSwapper::Window& w) {
    if (w.index == 1) throw std::runtime_error("update failed");
  }), "update failed", std::runtime_error);
  CHECK(rig.pool.available() == 3);
}
