// divergence_probe MODE DIR: trains a small model through the Engine at ZeRO stage 3 on 2 ranks
// until the ranks diverge as scripts make them diverge, with the default handlers (the job ends
// through MPI_Abort, naming each rank's call); the rank that leaves the common path prints "rank R
// diverges: ...", and divergence_test.py times the job's end from there and reads the report.
//   save:  after step 3, rank 0 alone saves a checkpoint (the "save on rank 0" habit); rank 1
//          trains on and then leaves (its Engine closes).
//   fewer: rank 1 has one batch fewer: it leaves after 3 steps, rank 0 starts a fourth.
//   idle:  in step 4 rank 1 sits outside every ZRT call (its own work) for a minute.
#include <chrono>
#include <cmath>
#include <cstdio>
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

namespace {

void trainStep(Engine& engine) {
  engine.beginMicroStep();
  for (std::size_t mod = engine.numModules(); mod-- > 0;) {
    const auto p = engine.parameters(mod);
    const auto g = engine.gradients(mod);
    for (std::size_t t = 0; t < p.size(); ++t)
      for (std::size_t i = 0; g[t].data && i < p[t].numel; ++i)  // null: a frozen parameter
        test::storeValue(g[t].dtype, g[t].data, i,
                         static_cast<float>(engine.gradientSeed() * std::sin(test::loadValue(p[t].dtype, p[t].data, i))));
    engine.backwardDone(mod);
    engine.release(mod);
  }
  engine.endMicroStep();
  engine.step();
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiEnvironment env(&argc, &argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s save|fewer|idle DIR\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  try {
    comm::MpiCommunicator comm(MPI_COMM_WORLD);
    const int world = comm.size(), me = comm.rank();
    const std::string config = detail::cat(
        R"({"train_batch_size": )", world,
        R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},)",
        R"("zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 10}})");
    MemoryLedger ledger;
    auto device = makeDevice("host:64M", ledger);
    Engine engine(parseConfig(config, "divergence_probe", world), *device, comm, test::testModel());
    const int steps = mode == "fewer" && me == 1 ? 3 : mode == "save" ? 3 : 6;
    for (int step = 0; step < steps; ++step) {
      if (mode == "idle" && me == 1 && step == 3) {
        std::printf("rank 1 diverges: leaves ZRT for a minute\n");
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::seconds(60));
      }
      trainStep(engine);
    }
    std::printf("rank %d trained %d steps\n", me, steps);
    std::fflush(stdout);
    if (mode == "save") {
      if (me == 0) {
        std::printf("rank 0 diverges: saves alone\n");
        std::fflush(stdout);
        engine.save(dir, "rank0_only");
      } else {
        trainStep(engine);
      }
    }
    if (mode == "fewer" && me == 1) std::printf("rank 1 diverges: its data ended\n");
    std::printf("rank %d leaves\n", me);
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "divergence_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
