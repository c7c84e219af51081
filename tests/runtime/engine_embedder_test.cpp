// What an embedder's own loop leans on besides the step (docs/engine.md): typed views of the
// tensors the Engine hands out, GatheredParameters releasing its module whatever happens in its
// scope, the gathered state dict, and reading parameters between steps (a forward-only
// evaluation) at every stage, NVMe offload included, without changing what training computes:
// a run that reads between steps ends with the same bits as one that does not.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "runtime/gathered_parameters.h"
#include "runtime/state_dict.h"
#include "tests/runtime/checkpoint_test_support.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/mpi_test.h"

using namespace zrt;

namespace {

struct Setting {
  std::string name;
  int stage;
  DType dtype;
  bool nvme;
};

std::string configFor(const Setting& s, int world, const std::string& nvmeDir) {
  std::string offload;
  if (s.nvme)
    offload = detail::cat(R"(, "offload_optimizer": {"device": "nvme", "nvme_path": [")", nvmeDir,
                          R"("]}, "offload_param": {"device": "nvme", "nvme_path": [")", nvmeDir,
                          R"("], "max_in_cpu": 0})");
  std::string precision;
  if (s.dtype == DType::BF16) precision = R"("bf16": {"enabled": true},)";
  return detail::cat(R"({"train_batch_size": )", 4 * world, R"(, "train_micro_batch_size_per_gpu": 2,)",
                     R"("optimizer": {"type": "AdamW", "params": {"lr": 0.01}},)", precision,
                     R"("zero_optimization": {"stage": )", s.stage,
                     R"(, "stage3_param_persistence_threshold": 0)", offload, "}}");
}

struct Built {
  Built(const Setting& s, comm::Communicator& comm, const std::string& nvmeDir)
      : config(parseConfig(configFor(s, comm.size(), nvmeDir), s.name, comm.size())),
        device(makeDevice("host:64M", ledger)),
        engine(config, *device, comm, test::testModel(0.02)) {}
  Config config;
  MemoryLedger ledger;
  std::unique_ptr<Device> device;
  Engine engine;
};

}  // namespace

TEST_CASE("typed views: a span of the tensor's own element type, and floats in any dtype") {
  const std::string name = "layer0.weight";
  const std::vector<std::int64_t> shape{3};
  float f[3] = {1.5f, -2.0f, 0.25f};
  const TensorRef t32{&name, &shape, f, DType::F32, 3};
  const std::span<float> s = t32.as<float>();
  CHECK(s.size() == 3);
  CHECK(s[1] == -2.0f);
  s[2] = 4.0f;
  CHECK(f[2] == 4.0f);
  CHECK(t32.as<const float>()[0] == 1.5f);
  const std::string wrong = test::messageOf([&] { (void)t32.as<BFloat16>(); });
  CHECK_MESSAGE(wrong.find("tensor 'layer0.weight' holds fp32, not bf16") != std::string::npos, wrong);

  std::uint16_t b[3] = {};
  const TensorRef t16{&name, &shape, b, DType::BF16, 3};
  t16.store(0, 1.5f);
  t16.store(1, 1.0f + 1.0f / 512);  // halfway between two bf16 values: ties to even (1.0)
  CHECK(t16.load(0) == 1.5f);
  CHECK(t16.load(1) == 1.0f);
  CHECK(t16.as<BFloat16>()[0].bits == floatToBf16(1.5f));
  std::uint16_t h[1] = {};
  const TensorRef th{&name, &shape, h, DType::F16, 1};
  th.store(0, 0.1f);
  CHECK(th.load(0) == halfToFloat(floatToHalf(0.1f)));
  const TensorRef frozen{&name, &shape, nullptr, DType::F32, 3};
  CHECK(test::messageOf([&] { (void)frozen.as<float>(); }).find("has no memory") != std::string::npos);
}

TEST_CASE("reading parameters between steps, scoped or whole, changes nothing training computes") {
  comm::MpiCommunicator comm(test::testComm());
  test::SharedTempDir dir(test::testComm());
  const std::vector<Setting> settings{{"stage 0", 0, DType::F32, false}, {"stage 2 bf16", 2, DType::BF16, false},
                                      {"stage 3", 3, DType::F32, false}, {"stage 3 bf16", 3, DType::BF16, false},
                                      {"stage 3, NVMe", 3, DType::F32, true}};
  for (const Setting& s : settings) {
    CAPTURE(s.name);
    Built straight(s, comm, dir.path());
    test::train(straight.engine, comm, 4, 2);

    Built reading(s, comm, dir.path());
    test::train(reading.engine, comm, 2, 2);
    // A forward-only evaluation outside a micro-step, one module at a time.
    double sum = 0;
    for (std::size_t m = 0; m < reading.engine.numModules(); ++m) {
      const GatheredParameters p(reading.engine, m);
      REQUIRE(p.size() == 3);
      for (std::uint64_t i = 0; i < p[0].numel; ++i) sum += p[0].load(i);
    }
    CHECK(std::isfinite(sum));
    // A forward that throws with its module gathered: the module is released all the same.
    CHECK(test::messageOf([&] {
            const GatheredParameters p(reading.engine, 1);
            throw std::runtime_error("the caller's forward failed");
          }) == "the caller's forward failed");
    // The state dict: every parameter by name, equal to parameterValues.
    const std::vector<StateDictEntry> dict = stateDict(reading.engine);
    REQUIRE(dict.size() == static_cast<std::size_t>(3 * test::kLayers));
    for (int l = 0; l < test::kLayers; ++l) {
      const char* names[3] = {"weight", "scale", "bias"};
      for (std::size_t k = 0; k < 3; ++k) {
        const StateDictEntry& e = dict[static_cast<std::size_t>(3 * l) + k];
        CHECK(e.name == "layer" + std::to_string(l) + "." + names[k]);
        CHECK(e.shape == (k == 0 ? std::vector<std::int64_t>{test::kWidth, test::kWidth}
                                 : std::vector<std::int64_t>{test::kWidth}));
        CHECK(e.values == reading.engine.parameterValues(static_cast<std::size_t>(l), k));
      }
    }
    test::TrainHooks hooks;
    hooks.firstStep = 2;
    test::train(reading.engine, comm, 2, 2, hooks);
    CHECK(test::sameBits(test::trainedValues(reading.engine), test::trainedValues(straight.engine)));
  }
}
