// Stage 3's gather/release cycle allocates its device memory in the first step only: from the
// second step on, every gathered copy lands in a slot (or a cached block) that exists already, so
// the device sees no raw allocation (a cudaMalloc, which would synchronise a GPU) in 49 steps.
// The count is the device's own, so it covers every allocation the engine makes, not only the
// coordinator's. The same holds on the strict device, whose staged lane stages through pinned
// buffers of its own.
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdint>
#include <string>

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

std::string config(int world, const std::string& zero) {
  return detail::cat(R"({"train_batch_size": )", kMicro * world,
                     R"(, "train_micro_batch_size_per_gpu": )", kMicro,
                     R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},)",
                     R"("zero_optimization": {"stage": 3, "reduce_bucket_size": 50,)",
                     R"( "stage3_param_persistence_threshold": 10)", zero, "}}");
}

void checkNoRawAllocationAfterStepOne(comm::Communicator& comm, const std::string& zero,
                                      const std::string& spec = "host:64M") {
  MemoryLedger ledger;
  auto device = makeDevice(spec, ledger);
  Engine engine(parseConfig(config(comm.size(), zero), "raw-alloc", comm.size()), *device, comm,
                test::testModel());
  test::TrainHooks first;
  // The strict device: the model reads and writes through the device's copies.
  if (!device->hostReadsDeviceMemory()) first.device = device.get();
  test::train(engine, comm, 1, kMicro, first);
  const std::int64_t afterFirst = device->rawAllocations();
  const std::uint64_t reservedAfterFirst = ledger.reserved().current;
  CHECK(afterFirst > 0);  // the count does see the engine's allocations
  test::TrainHooks later = first;
  later.firstStep = 1;
  test::train(engine, comm, 49, kMicro, later);
  CHECK(device->rawAllocations() - afterFirst == 0);
  CHECK(ledger.reserved().current == reservedAfterFirst);
  // In use never exceeds reserved: every device byte handed out was obtained from the device.
  CHECK(ledger.total(MemPlace::Device).peak <= ledger.reserved().peak);
}

}  // namespace

TEST_CASE("stage 3 for 50 steps: no raw device allocation after step 1") {
  ZRT_REQUIRE_RANKS(2);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  SUBCASE("prefetch and reuse on") { checkNoRawAllocationAfterStepOne(comm, ""); }
  SUBCASE("one module live at a time: every fetch gathers again") {
    checkNoRawAllocationAfterStepOne(comm, R"(, "stage3_max_live_parameters": 80, )"
                                           R"("stage3_max_reuse_distance": 0)");
  }
  SUBCASE("on host-strict, every fetch gathering again through the staged lane") {
    checkNoRawAllocationAfterStepOne(comm,
                                     R"(, "stage3_max_live_parameters": 80, )"
                                     R"("stage3_max_reuse_distance": 0)",
                                     "host-strict:64M");
  }
}
