// GPT-2 trained through the Engine (EngineSource), one SGD step at ZeRO stages 0-3 on every
// rank's own micro-batch: the Engine must end the step with, for every parameter,
//   after = before - lr x (mean over ranks of that rank's gradient),
// the gradients computed independently here by the same model over a plain fp32 source.
// Checks the wiring end to end: the module order and pairing the Engine accepts, the tied
// embedding's gradient reported once, and the seed the Engine asks for. Then LoRA: the frozen
// base stays bit for bit while the adapters take the mean gradient, at every stage (the base
// sharded at stage 3); fresh adapters give the base model's loss; and the ledger holds gradients
// and optimizer state for the adapters only.
#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "tests/support/mpi_test.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

TEST_CASE("gpt2 through the Engine: an SGD step at stages 0-3 applies the ranks' mean gradient") {
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

  for (int stage : {0, 1, 2, 3}) {
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

namespace {

std::string configJson(int micro, int world, int stage, const char* optimizer, double lr) {
  return detail::cat(R"({"train_batch_size": )", micro * world, R"(, "train_micro_batch_size_per_gpu": )", micro,
                     R"(, "optimizer": {"type": ")", optimizer, R"(", "params": {"lr": )", lr,
                     R"(}}, "zero_optimization": {"stage": )", stage, "}}");
}

// Bytes the ledger holds under `tag`, summed over every place.
std::uint64_t bytesOf(const MemoryLedger& ledger, MemTag tag) {
  std::uint64_t n = 0;
  for (int p = 0; p < kNumMemPlaces; ++p) n += ledger.get(tag, static_cast<MemPlace>(p)).current;
  return n;
}

}  // namespace

TEST_CASE("gpt2 with LoRA through the Engine: the base frozen at every stage, adapters trained, ledger") {
  const int world = zrt::test::worldSize(), rank = zrt::test::worldRank();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const Gpt2Shape shape{.layers = 2, .hidden = 16, .heads = 2, .seqLen = 8, .vocab = 256};
  const LoraConfig lora{4, 8.0, {LoraTarget::Qkv, LoraTarget::Fc}};
  const int micro = 2;
  const std::size_t n = static_cast<std::size_t>(micro) * shape.seqLen;
  const auto in = randomTokens(n, shape.vocab, 1000 + rank), tg = randomTokens(n, shape.vocab, 2000 + rank);

  SUBCASE("fresh adapters: the base model's loss, bit for bit, at every stage") {
    for (int stage : {0, 1, 2, 3}) {
      CAPTURE(stage);
      const Config config = parseConfig(configJson(micro, world, stage, "AdamW", 1e-3), "gpt2 lora test", world);
      MemoryLedger ledger;
      auto device = makeDevice("host", ledger);
      Engine full(config, *device, comm, gpt2Model(shape, 5));
      Engine adapted(config, *device, comm, gpt2Model(shape, 5, lora));
      Gpt2 plain(shape, {}, *device, micro), withLora(shape, {.lora = lora}, *device, micro);
      EngineSource a(full), b(adapted);
      CHECK(withLora.loss(b, in.data(), tg.data(), micro) == plain.loss(a, in.data(), tg.data(), micro));
    }
  }

  SUBCASE("an SGD step: the base unchanged, every adapter moved by the ranks' mean gradient") {
    // B away from zero, so lora_A's gradient is not zero (it reaches A only through B).
    EngineModel registration = gpt2Model(shape, 5, lora);
    std::uint64_t k = 0;
    for (ModuleSpec& m : registration.modules)
      for (ParamSpec& p : m.params)
        if (p.name.find("lora_B") != std::string::npos) p.init = init::normal(100 + k++, 0.05);
    REQUIRE(k == 4);

    MemoryLedger refLedger;
    auto refDevice = makeDevice("host", refLedger);
    Gpt2 refModel(shape, {.lora = lora}, *refDevice, micro);
    TestSource ref(registration, DType::F32);
    std::vector<std::vector<double>> meanGrad;
    for (int r = 0; r < world; ++r) {
      const auto rin = randomTokens(n, shape.vocab, 1000 + r), rtg = randomTokens(n, shape.vocab, 2000 + r);
      ref.beginMicroStep();
      refModel.forwardBackward(ref, rin.data(), rtg.data(), micro, 1.0);
      std::size_t t = 0;
      for (std::size_t m = 0; m < ref.numModules(); ++m)
        for (std::size_t i = 0; i < ref.numParams(m); ++i, ++t) {
          const auto g = ref.trainable(m, i) ? ref.grad(m, i) : std::vector<float>(ref.get(m, i).size(), 0.0f);
          if (meanGrad.size() <= t) meanGrad.emplace_back(g.size(), 0.0);
          for (std::size_t j = 0; j < g.size(); ++j) meanGrad[t][j] += double{g[j]} / world;
        }
    }

    const double lr = 1.0;
    for (int stage : {0, 1, 2, 3}) {
      CAPTURE(stage);
      MemoryLedger ledger;
      auto device = makeDevice("host", ledger);
      Engine engine(parseConfig(configJson(micro, world, stage, "SGD", lr), "gpt2 lora test", world), *device, comm,
                    registration);
      Gpt2 model(shape, {.activationCheckpointing = stage == 2, .lora = lora}, *device, micro);
      EngineSource src(engine);
      std::vector<std::vector<float>> before;
      for (std::size_t m = 0; m < engine.numModules(); ++m)
        for (std::size_t i = 0; i < ref.numParams(m); ++i) before.push_back(engine.parameterValues(m, i));
      engine.beginMicroStep();
      model.forwardBackward(src, in.data(), tg.data(), micro, engine.gradientSeed());
      engine.endMicroStep();
      CHECK(engine.step().taken);

      std::size_t t = 0;
      int adapters = 0;
      for (std::size_t m = 0; m < engine.numModules(); ++m)
        for (std::size_t i = 0; i < ref.numParams(m); ++i, ++t) {
          CAPTURE(ref.name(m, i));
          const std::vector<float> after = engine.parameterValues(m, i);
          if (!ref.trainable(m, i)) {
            CHECK(after == before[t]);
            continue;
          }
          ++adapters;
          double gmax = 0, worst = 0;
          for (std::size_t j = 0; j < after.size(); ++j) {
            gmax = std::max(gmax, std::abs(meanGrad[t][j]));
            worst = std::max(worst, std::abs((double{before[t][j]} - double{after[j]}) / lr - meanGrad[t][j]));
          }
          CAPTURE(gmax);
          CAPTURE(worst);
          CHECK(gmax > 0);
          CHECK(worst <= 5e-7 + 1e-5 * gmax);  // as the test above
        }
      CHECK(adapters == 2 * 2 * shape.layers);
    }
  }

  SUBCASE("the ledger: gradients and optimizer state for the adapters alone; the base sharded at stage 3") {
    // The reference: an engine whose model is the adapters alone (all trainable, the same modules).
    const EngineModel registration = gpt2Model(shape, 5, lora);
    EngineModel adaptersOnly;
    std::uint64_t frozenBytes = 0;
    for (const ModuleSpec& m : registration.modules) {
      ModuleSpec only{m.name, {}};
      for (const ParamSpec& p : m.params) {
        if (p.trainable)
          only.params.push_back(p);
        else
          frozenBytes += numelOf(p) * sizeof(float);
      }
      if (!only.params.empty()) adaptersOnly.modules.push_back(std::move(only));
    }
    for (int stage : {0, 1, 2, 3}) {
      CAPTURE(stage);
      const Config config = parseConfig(configJson(micro, world, stage, "AdamW", 1e-3), "gpt2 lora test", world);
      MemoryLedger withBase, alone, full;
      auto d1 = makeDevice("host", withBase), d2 = makeDevice("host", alone), d3 = makeDevice("host", full);
      Engine a(config, *d1, comm, registration), b(config, *d2, comm, adaptersOnly), c(config, *d3, comm, gpt2Model(shape, 5));
      CAPTURE(a.memorySummary());
      CHECK(bytesOf(withBase, MemTag::Gradients) == bytesOf(alone, MemTag::Gradients));
      CHECK(bytesOf(withBase, MemTag::OptimizerState) == bytesOf(alone, MemTag::OptimizerState));
      CHECK(bytesOf(withBase, MemTag::OptimizerState) > 0);
      // The full model's would be far larger: the adapters are a small part of it.
      CHECK(bytesOf(full, MemTag::OptimizerState) > 4 * bytesOf(withBase, MemTag::OptimizerState));
      const std::uint64_t params = bytesOf(withBase, MemTag::Parameters) - bytesOf(alone, MemTag::Parameters);
      CAPTURE(params);
      CAPTURE(frozenBytes);
      if (stage < 3 || world == 1)
        CHECK(params >= frozenBytes);  // the whole base on every rank (padding aside)
      else
        CHECK(params < frozenBytes / static_cast<std::uint64_t>(world) + 4096);  // this rank's shard
    }
  }
}
