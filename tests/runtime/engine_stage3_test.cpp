// ZeRO stage 3 beyond equivalence (engine_equivalence_test covers that for every precision and
// accumulation): what it saves, what its prefetch achieves, and how it fails.
// - Memory: on a device too small for stage 2, stage 2 fails set-up with the OOM report and
//   stage 3 trains.
// - Prefetch: once the first step has recorded the trace, a fixed module order needs no gather
//   on demand; with prefetch off, every fetch waits on one. The step report counts them.
// - A step whose module order changes, and a module read twice in one forward (a tied
//   embedding), still end on the single-rank stage-0 parameters; the changed order is recorded
//   and prefetched again from the next step.
// - Ranks that take different code paths stop with an error naming the fetch and each rank's
//   module, on every rank, instead of hanging in mismatched all-gathers.
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/mpi_test.h"

using namespace zrt;

namespace {

constexpr std::int64_t kMicro = 2;

// AdamW in fp32; stage 3 limits for the test model's three modules of 80 elements.
std::string config(int stage, int world, const std::string& zero) {
  return detail::cat(R"({"train_batch_size": )", kMicro * world, R"(, "train_micro_batch_size_per_gpu": )",
                     kMicro, R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},)",
                     R"("zero_optimization": {"stage": )", stage,
                     R"(, "reduce_bucket_size": 50, "stage3_param_persistence_threshold": 10)", zero, "}}");
}

std::uint64_t devicePeak(int stage, comm::Communicator& comm, const std::string& zero) {
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(parseConfig(config(stage, comm.size(), zero), "peak", comm.size()), *device, comm,
                test::testModel());
  test::train(engine, comm, 2, kMicro);
  return ledger.total(MemPlace::Device).peak;
}

}  // namespace

TEST_CASE("a device too small for stage 2 fails it with the OOM report; stage 3 trains") {
  const int world = test::worldSize();
  ZRT_REQUIRE_RANKS(2);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  // One module gathered at a time: stage 3 holds 1/N of the parameters plus 80 elements.
  const std::string oneLive = R"(, "stage3_max_live_parameters": 80)";
  const std::uint64_t stage3 = devicePeak(3, comm, oneLive);
  const std::uint64_t stage2 = devicePeak(2, comm, oneLive);
  CAPTURE(stage2);
  CAPTURE(stage3);
  REQUIRE(stage3 < stage2);
  MemoryLedger ledger;
  auto device = makeDevice("host:" + std::to_string(stage3), ledger);
  bool outOfMemory = false;
  std::string msg;
  try {
    Engine e(parseConfig(config(2, world, oneLive), "stage2.json", world), *device, comm, test::testModel());
    test::train(e, comm, 1, kMicro);
  } catch (const OutOfMemory& ex) {  // the failing rank's class, on every rank
    outOfMemory = true;
    msg = ex.what();
  }
  CAPTURE(msg);
  CHECK(outOfMemory);
  CHECK(msg.find("memory ledger") != std::string::npos);
  Engine engine(parseConfig(config(3, world, oneLive), "stage3.json", world), *device, comm, test::testModel());
  std::vector<double> losses;
  test::train(engine, comm, 20, kMicro, {}, &losses);
  CHECK(losses.back() < losses.front());
  CHECK(ledger.total(MemPlace::Device).peak <= stage3);
}

TEST_CASE("after the first step, a fixed module order needs no gather on demand") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  // Forward 0,1,2 and backward 2,1,0: six fetches a step.
  {
    Engine engine(parseConfig(config(3, world, R"(, "stage3_max_live_parameters": 160)"), "prefetch", world),
                  *device, comm, test::testModel());
    const auto reports = test::train(engine, comm, 5, kMicro);
    CHECK(reports[0].gathersOnDemand == 6);  // recording: nothing known ahead
    for (std::size_t s = 1; s < reports.size(); ++s) {
      CAPTURE(s);
      CHECK(reports[s].gathersOnDemand == 0);
      CHECK(reports[s].gathersPrefetched + reports[s].gathersReused == 6);
      CHECK(reports[s].gathersPrefetched >= 3);
    }
  }
  {
    Engine engine(parseConfig(config(3, world, R"(, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0)"),
                              "no prefetch", world),
                  *device, comm, test::testModel());
    const auto reports = test::train(engine, comm, 3, kMicro);
    for (const StepReport& r : reports) {
      CHECK(r.gathersPrefetched == 0);
      // Layer 2 is used again at once (forward's end, backward's start): kept at distance 0.
      CHECK(r.gathersOnDemand + r.gathersReused == 6);
      CHECK(r.gathersOnDemand >= 5);
    }
  }
}

TEST_CASE("a changed module order and a module read twice still train exactly") {
  const int world = test::worldSize();
  comm::MpiCommunicator self(MPI_COMM_SELF);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  constexpr int kSteps = 8;
  // The reference: one rank, stage 0, the whole global batch, layers read in order.
  const std::string refConfig =
      detail::cat(R"({"train_batch_size": )", kMicro * world, R"(, "train_micro_batch_size_per_gpu": )", kMicro * world,
                  R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 0}})");
  Engine whole(parseConfig(refConfig, "reference", 1), *device, self, test::testModel());
  test::train(whole, self, kSteps, kMicro * world);

  test::TrainHooks hooks;
  // Steps 3 and 4 read the layers in another order; step 3 reads layer 0 twice as well.
  hooks.forwardOrder = [](int step) {
    return step == 3 || step == 4 ? std::vector<int>{2, 0, 1} : std::vector<int>{0, 1, 2};
  };
  Engine engine(parseConfig(config(3, world, R"(, "stage3_max_live_parameters": 160)"), "order", world),
                *device, comm, test::testModel());
  std::vector<StepReport> reports;
  for (int s = 0; s < kSteps; ++s) {
    hooks.firstStep = s;
    hooks.refetchFirst = s == 3;
    reports.push_back(test::train(engine, comm, 1, kMicro, hooks)[0]);
  }
  CHECK(reports[3].gathersOnDemand > 0);  // the new order is served on demand and recorded
  CHECK(reports[4].gathersOnDemand > 0);  // step 3's trace (with its extra read) is not step 4's
  CHECK(reports[5].gathersOnDemand > 0);  // back to the old order: recorded again
  CHECK(reports[6].gathersOnDemand == 0);
  CHECK(reports[7].gathersOnDemand == 0);
  const auto got = test::trainedValues(engine);
  const auto want = test::trainedValues(whole);
  double worst = 0, scale = 0;
  for (std::size_t t = 0; t < want.size(); ++t)
    for (std::size_t i = 0; i < want[t].size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[t][i]) - want[t][i]));
      scale = std::max(scale, std::fabs(static_cast<double>(want[t][i])));
    }
  CAPTURE(worst);
  CHECK(worst <= 1e-6 * scale);  // fp32: as engine_equivalence_test derives
}

TEST_CASE("ranks that fetch different modules stop with a message naming them, no hang") {
  const int world = test::worldSize();
  ZRT_REQUIRE_RANKS(2);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(parseConfig(config(3, world, ""), "diverge", world), *device, comm, test::testModel());
  test::TrainHooks hooks;
  // The last rank takes another code path: it reads layer 1 first.
  hooks.forwardOrder = [&](int) {
    return comm.rank() == world - 1 ? std::vector<int>{1, 0, 2} : std::vector<int>{0, 1, 2};
  };
  const std::string msg = test::messageOf([&] { test::train(engine, comm, 1, kMicro, hooks); });
  CAPTURE(msg);
  CHECK(msg.find("ranks fetch different modules at fetch #0") != std::string::npos);
  CHECK(msg.find("rank 0: 'layer0'") != std::string::npos);
  CHECK(msg.find("rank " + std::to_string(world - 1) + ": 'layer1'") != std::string::npos);
}
