// The NVMe optimizer swapper on its own (runtime/optimizer_swapper.h): every sub-group of every
// state file reaches the update exactly once per pass, holding what the previous pass wrote,
// for each buffer count, both pipeline settings and both I/O engines; an I/O failure names the
// file and offset and leaves no request in flight. The reference is the arithmetic itself:
// element i of state k starts at k·10⁶ + i (exact in fp32) and each pass adds 1.
// The engine's ring threads and the caller share the pinned buffers, so this program is also
// what the ThreadSanitizer build runs for the swapper (docs/operations.md).
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdint>
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
