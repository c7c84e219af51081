// The config's zrt.comm_timeout_s governs the communicator an embedder hands the Engine, built as
// docs/engine.md shows (default options, 600 s): a rank that does not join a collective is
// reported after the config's time, and the stage-3 gather lane the Engine duplicates has the same
// timeout. ZRT_COMM_TIMEOUT_S, when set, still overrides the config (docs/comm.md). onTimeout is
// replaced so the job survives the report; the real MPI_Abort path is comm_timeout_abort's.
#include <doctest/doctest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace std::chrono_literals;

namespace {

std::string stage3Config(int world, double timeoutSeconds) {
  return detail::cat(R"({"train_batch_size": )", 2 * world, R"(, "train_micro_batch_size_per_gpu": 2, )",
                     R"("optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, )",
                     R"("zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 10}, )",
                     R"("zrt": {"comm_timeout_s": )", timeoutSeconds, "}}");
}

std::chrono::milliseconds laneTimeout(const Engine& engine) {
  const auto* lane = dynamic_cast<const comm::MpiCommunicator*>(engine.gatherLane());
  return lane ? lane->options().timeout : 0ms;
}

}  // namespace

TEST_CASE("a rank missing a collective is reported after the config's comm_timeout_s") {
  ZRT_REQUIRE_RANKS(2);
  ::unsetenv("ZRT_COMM_TIMEOUT_S");
  const int me = test::worldRank(), world = test::worldSize();
  std::mutex mu;
  std::string report;
  std::atomic<bool> reported{false};
  comm::CommOptions o = comm::CommOptions::fromEnvironment();  // what MpiCommunicator(comm) takes
  REQUIRE(o.timeout == 600s);
  o.onTimeout = [&](const std::string& r) {
    std::lock_guard lock(mu);
    report = r;
    reported = true;
  };
  comm::MpiCommunicator comm(MPI_COMM_WORLD, o);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(parseConfig(stage3Config(world, 2), "timeout.json", world), *device, comm, test::testModel());
  CHECK(comm.options().timeout == 2s);
  CHECK(laneTimeout(engine) == 2s);

  // Rank 0 waits in a barrier that rank 1 joins only once rank 0 has the report (or after 30 s).
  const auto start = std::chrono::steady_clock::now();
  if (me == 0) {
    comm::Work w = comm.barrierAsync();
    for (int i = 0; i < 3000 && !reported; ++i) std::this_thread::sleep_for(10ms);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(reported.load());
    CHECK(waited < 10.0);  // the communicator's own default would have taken 600 s
    for (int p = 1; p < world; ++p) MPI_Send(&me, 1, MPI_INT, p, 7, test::testComm());
    w.wait(30s);
    std::lock_guard lock(mu);
    CHECK(report.find("(timeout 2.0 s)") != std::string::npos);
    MESSAGE(report);
  } else {
    int token = 0;
    MPI_Recv(&token, 1, MPI_INT, 0, 7, test::testComm(), MPI_STATUS_IGNORE);
    comm.barrier();
  }
}

TEST_CASE("ZRT_COMM_TIMEOUT_S overrides the config's comm_timeout_s") {
  const int world = test::worldSize();
  ::setenv("ZRT_COMM_TIMEOUT_S", "45", 1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  {
    Engine engine(parseConfig(stage3Config(world, 2), "timeout.json", world), *device, comm, test::testModel());
    CHECK(comm.options().timeout == 45s);
    if (world > 1) CHECK(laneTimeout(engine) == 45s);
  }
  ::unsetenv("ZRT_COMM_TIMEOUT_S");
}

TEST_CASE("the hang report names the Engine call that posted the collective") {
  ZRT_REQUIRE_RANKS(2);
  ::unsetenv("ZRT_COMM_TIMEOUT_S");
  const int me = test::worldRank(), world = test::worldSize();
  std::mutex mu;
  std::string report;
  std::atomic<bool> reported{false};
  comm::CommOptions o = comm::CommOptions::fromEnvironment();
  // Runs on the watchdog's thread while rank 0's caller is blocked in the Engine: it lets the
  // other ranks join (once, whichever lane's watchdog reports).
  o.onTimeout = [&](const std::string& r) {
    {
      std::lock_guard lock(mu);
      report = r;
    }
    if (reported.exchange(true)) return;
    for (int p = 1; p < world; ++p) MPI_Send(&me, 1, MPI_INT, p, 8, test::testComm());
  };
  comm::MpiCommunicator comm(MPI_COMM_WORLD, o);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(parseConfig(stage3Config(world, 2), "timeout.json", world), *device, comm, test::testModel());

  // Rank 0 fetches module 0, whose gather the other ranks join only once rank 0 has the report.
  if (me != 0) {
    int token = 0;
    MPI_Recv(&token, 1, MPI_INT, 0, 8, test::testComm(), MPI_STATUS_IGNORE);
  }
  engine.beginMicroStep();
  (void)engine.parameters(0);
  engine.release(0);
  if (me == 0) {
    CHECK(reported.load());
    std::lock_guard lock(mu);
    MESSAGE(report);
    CHECK(report.find(", posted in Engine::parameters(module '" + engine.moduleName(0) +
                      "'), micro-step 0 of step 1") != std::string::npos);
  }
}
