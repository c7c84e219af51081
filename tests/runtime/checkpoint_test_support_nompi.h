// The one-rank engine the SIGKILL test and its helper share (no MPI: a thread world of one).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"

namespace zrt::test {

struct SoloEngine {
  explicit SoloEngine(comm::Communicator& comm)
      : config(parseConfig(R"({"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
                               "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
                               "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}})",
                           "checkpoint kill test", 1)),
        device(makeDevice("host:64M", ledger)),
        engine(config, *device, comm, testModel(0.02)) {}
  Config config;
  MemoryLedger ledger;
  std::unique_ptr<Device> device;
  Engine engine;
};

}  // namespace zrt::test
