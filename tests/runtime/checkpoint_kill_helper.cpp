// checkpoint_kill_helper DIR TAG STEPS: trains the test model STEPS steps on one rank (a thread
// world: no MPI) and saves it as DIR/TAG. checkpoint_kill_test runs it with
// ZRT_CHECKPOINT_FAULT=kill:K so the save dies by SIGKILL at its K-th step. Exit 0 when saved,
// 1 on an error (printed).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "comm/threads/thread_world.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/checkpoint_test_support_nompi.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DIR TAG STEPS\n", argv[0]);
    return 1;
  }
  try {
    zrt::comm::ThreadWorld world(1);
    auto comm = world.connect(0);
    zrt::test::SoloEngine t(*comm);
    zrt::test::train(t.engine, *comm, std::atoi(argv[3]), 2);
    t.engine.save(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_kill_helper: %s\n", e.what());
    return 1;
  }
  return 0;
}
