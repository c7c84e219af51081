// checkpoint_tool_fixture DIR DTYPE STAGE: trains the runtime tests' model (frozen per-layer
// scales, trainable weights and biases) 4 steps on every rank of MPI_COMM_WORLD, saves it as
// DIR/trained, and (rank 0) writes DIR/expected.json: each parameter's safetensors name,
// shape, whether it trains, and its values as the engine holds them (fp32 bit patterns of
// Engine::parameterValues), for check_zrt_ckpt.py to compare exports with.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_env.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"

int main(int argc, char** argv) {
  zrt::comm::MpiEnvironment mpi(&argc, &argv);
  if (argc != 4) {
    std::cerr << "usage: checkpoint_tool_fixture DIR DTYPE STAGE\n";
    return 2;
  }
  try {
    zrt::comm::MpiCommunicator comm(MPI_COMM_WORLD);
    const std::string dir = argv[1], dtype = argv[2];
    const int world = comm.size();
    std::string precision;
    if (dtype == "bf16") precision = R"("bf16": {"enabled": true},)";
    if (dtype == "fp16") precision = R"("fp16": {"enabled": true, "initial_scale_power": 8},)";
    const std::string text = zrt::detail::cat(
        R"({"train_batch_size": )", 2 * world, R"(, "train_micro_batch_size_per_gpu": 2,)",
        R"("optimizer": {"type": "AdamW", "params": {"lr": 0.02, "weight_decay": 0.01}},)", precision,
        R"("zero_optimization": {"stage": )", argv[3], "}}");
    const zrt::Config config = zrt::parseConfig(text, "checkpoint_tool_fixture", world);
    zrt::MemoryLedger ledger;
    auto device = zrt::makeDevice("host:64M", ledger);
    zrt::EngineModel model = zrt::test::testModel(0.02);
    zrt::Engine engine(config, *device, comm, model);
    zrt::test::train(engine, comm, 4, 2);
    engine.save(dir, "trained");
    nlohmann::json expected = nlohmann::json::array();
    for (std::size_t m = 0; m < model.modules.size(); ++m)
      for (std::size_t i = 0; i < model.modules[m].params.size(); ++i) {
        const zrt::ParamSpec& p = model.modules[m].params[i];
        const std::vector<float> v = engine.parameterValues(m, i);  // collective at stage 3
        std::vector<std::uint32_t> bits(v.size());
        std::memcpy(bits.data(), v.data(), v.size() * 4);
        expected.push_back({{"name", model.modules[m].name + "." + p.name}, {"shape", p.shape},
                            {"trainable", p.trainable}, {"fp32_bits", bits}});
      }
    if (comm.rank() == 0) std::ofstream(dir + "/expected.json") << expected.dump();
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_tool_fixture: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
