// dead_rank_probe NVME_DIR VICTIM STALL_STEP [throw]: trains a small model through the Engine under
// mpirun at ZeRO stage 3 with the optimizer state in swap files under NVME_DIR, forever. In step
// STALL_STEP rank VICTIM stops inside its backward (after its other ranks' collectives of that
// step are posted) and says so with its pid, so dead_rank_test.sh can SIGKILL it while every
// other rank waits in a collective for it. With "throw", rank VICTIM instead throws there, as a
// caller's own code can fail mid-step, and unwinds through the Engine's destructors while its
// peers wait in the step's collectives; VICTIM -1 makes every rank throw there together, as an
// error every rank agrees on does. Each rank first prints "rank R pid P". A second communicator
// (a program's own, beside the Engine's) has a barrier in flight on the other ranks from step
// STALL_STEP on, which VICTIM never joins: the loss must still be named once per rank.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_env.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"

using namespace zrt;

int main(int argc, char** argv) {
  comm::MpiEnvironment env(&argc, &argv);
  if (argc != 4 && !(argc == 5 && std::string(argv[4]) == "throw")) {
    std::fprintf(stderr, "usage: %s NVME_DIR VICTIM STALL_STEP [throw]\n", argv[0]);
    return 2;
  }
  const std::string nvme = argv[1];
  const int victim = std::atoi(argv[2]), stallStep = std::atoi(argv[3]);
  const bool throws = argc == 5;
  std::printf("rank %d pid %d\n", env.rank(), static_cast<int>(::getpid()));
  std::fflush(stdout);
  try {
    comm::MpiCommunicator comm(MPI_COMM_WORLD);
    comm::MpiCommunicator idle(MPI_COMM_WORLD);
    const int world = comm.size();
    EngineModel model;
    for (int i = 0; i < 4; ++i) {
      ModuleSpec mod{"block" + std::to_string(i), {}};
      mod.params.push_back({"weight", {50, 60}, init::normal(7 + static_cast<std::uint64_t>(i), 0.5)});
      mod.params.push_back({"bias", {60}, init::normal(70 + static_cast<std::uint64_t>(i), 0.1)});
      model.modules.push_back(std::move(mod));
    }
    const std::string config = detail::cat(
        R"({"train_batch_size": )", world,
        R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "bf16": {"enabled": true},)",
        R"("zero_optimization": {"stage": 3, "reduce_bucket_size": 2000, "sub_group_size": 1024,)",
        R"("offload_optimizer": {"device": "nvme", "nvme_path": [")", nvme, R"("]}}})");
    MemoryLedger ledger;
    auto device = makeDevice("host:256M", ledger);
    Engine engine(parseConfig(config, "dead_rank_probe", world), *device, comm, std::move(model));
    comm::Work pending;
    for (int step = 0; step < 1'000'000; ++step) {
      if (step == stallStep && victim >= 0 && comm.rank() != victim) pending = idle.barrierAsync();
      engine.beginMicroStep();
      for (std::size_t mod = engine.numModules(); mod-- > 0;) {
        const auto p = engine.parameters(mod);
        const auto g = engine.gradients(mod);
        for (std::size_t t = 0; t < p.size(); ++t)
          for (std::size_t i = 0; i < p[t].numel; ++i)
            test::storeValue(g[t].dtype, g[t].data, i,
                             static_cast<float>(engine.gradientSeed() *
                                                std::sin(test::loadValue(p[t].dtype, p[t].data, i))));
        if ((comm.rank() == victim || victim < 0) && step == stallStep && mod == 1 && throws) {
          std::printf("rank %d throws in step %d, module %zu (pid %d)\n", comm.rank(), step, mod,
                      static_cast<int>(::getpid()));
          std::fflush(stdout);
          throw InvalidArgument(detail::cat("the caller's backward of module ", mod, " failed"));
        }
        if (comm.rank() == victim && step == stallStep && mod == 1) {
          std::printf("rank %d stalls in step %d, module %zu (pid %d)\n", victim, step, mod,
                      static_cast<int>(::getpid()));
          std::fflush(stdout);
          std::this_thread::sleep_for(std::chrono::seconds(120));  // the test kills it first
          std::fprintf(stderr, "dead_rank_probe: rank %d was not killed\n", victim);
          return 1;
        }
        engine.backwardDone(mod);
        engine.release(mod);
      }
      engine.endMicroStep();
      engine.step();
      if (comm.rank() == 0) {
        std::printf("step %d\n", step);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dead_rank_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
