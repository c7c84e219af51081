// GPT-2 trained through the Engine (EngineSource), one SGD step at ZeRO stages 0-2 on every
// rank's own micro-batch: the Engine must end the step with, for every parameter,
//   after = before - lr x (mean over ranks of that rank's gradient),
// the gradients computed independently here by the same model over a plain fp32 source.
// Checks the wiring end to end: the module order and pairing the Engine accepts, the tied
// embedding's gradient reported once, and the seed the Engine asks for.
#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <string>

#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "tests/support/mpi_test.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

TEST_CASE("gpt2 through the Engine: an SGD step at stages 0-2 applies the ranks' mean gradient") {
  const int world = zrt::test::worldSize(), rank = zrt::test::worldRank();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const Gpt2Shape shape{.layers = 2, .hidden = 16, .heads = 2, .seqLen = 8, .vocab = 256};
  const int micro = 2;
  const std::size_t n = static_cast<std::size_t>(micro) * shape.seqLen;
  // lr 1: the update is the gradient itself, so reading it back from (before - after) loses
  // only the parameters' rounding (an ulp of values up to ~1, a few 1e-7).
  const double lr = 1.0;

  // The reference: every rank's gradient, from the same registration, over a plain source.
  MemoryLedger refLedger;
  auto refDevice = makeDevice("host", refLedger);
  Gpt2 refModel(shape, {}, *refDevice, micro);
  TestSource ref(gpt2Model(shape, 5), DType::F32);
  std::vector<std::vector<double>> meanGrad;
  for (int r = 0; r < world; ++r) {
    const auto in = randomTokens(n, shape.vocab, 1000 + r), tg = randomTokens(n, shape.vocab, 2000 + r);
    ref.beginMicroStep();
    refModel.forwardBackward(ref, in.data(), tg.data(), micro, 1.0);
    std::size_t t = 0;
    for (std::size_t m = 0; m < ref.numModules(); ++m)
      for (std::size_t i = 0; i < ref.numParams(m); ++i, ++t) {
        const auto g = ref.grad(m, i);
        if (meanGrad.size() <= t) meanGrad.emplace_back(g.size(), 0.0);
        for (std::size_t j = 0; j < g.size(); ++j) meanGrad[t][j] += double{g[j]} / world;
      }
  }

  for (int stage : {0, 1, 2}) {
    CAPTURE(stage);
    const std::string json = detail::cat(
        R"({"train_batch_size": )", micro * world, R"(, "train_micro_batch_size_per_gpu": )", micro,
        R"(, "optimizer": {"type": "SGD", "params": {"lr": )", lr,
        R"(}}, "zero_optimization": {"stage": )", stage, "}}");
    MemoryLedger ledger;
    auto device = makeDevice("host", ledger);
    Engine engine(parseConfig(json, "gpt2 engine test", world), *device, comm, gpt2Model(shape, 5));
    Gpt2 model(shape, {.activationCheckpointing = stage == 2}, *device, micro);
    EngineSource src(engine);
    std::vector<std::vector<float>> before;
    for (std::size_t m = 0; m < engine.numModules(); ++m)
      for (std::size_t i = 0; i < ref.numParams(m); ++i) before.push_back(engine.parameterValues(m, i));

    const auto in = randomTokens(n, shape.vocab, 1000 + rank), tg = randomTokens(n, shape.vocab, 2000 + rank);
    engine.beginMicroStep();
    const double loss = model.forwardBackward(src, in.data(), tg.data(), micro, engine.gradientSeed());
    engine.endMicroStep();
    const StepReport report = engine.step();
    CHECK(report.taken);
    CHECK(std::isfinite(loss));

    std::size_t t = 0;
    for (std::size_t m = 0; m < engine.numModules(); ++m) {
      for (std::size_t i = 0; i < ref.numParams(m); ++i, ++t) {
        CAPTURE(ref.name(m, i));
        const std::vector<float> after = engine.parameterValues(m, i);
        REQUIRE(after.size() == meanGrad[t].size());
        double gmax = 0, worst = 0;
        for (std::size_t j = 0; j < after.size(); ++j) {
          gmax = std::max(gmax, std::abs(meanGrad[t][j]));
          const double applied = (double{before[t][j]} - double{after[j]}) / lr;
          worst = std::max(worst, std::abs(applied - meanGrad[t][j]));
        }
        CAPTURE(gmax);
        CAPTURE(worst);
        CHECK(gmax > 0);
        // The parameters' rounding (4 ulps of 1.0) plus the fp32 reduction's error relative
        // to the tensor's largest gradient.
        CHECK(worst <= 5e-7 + 1e-5 * gmax);
      }
    }
  }
}
