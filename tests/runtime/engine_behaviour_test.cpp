// The engine's memory, loss scaling and misuse handling on several ranks:
// - each rank's ledger holds exactly the ZeRO formulas' parameter, gradient and optimizer bytes
//   (written out here) and exactly zrt-plan's prediction, frozen parameters carrying neither
//   gradient nor optimizer state;
// - an inf injected on one rank skips the step on every rank, the scale follows DeepSpeed's
//   dynamic loss scaling (hysteresis first, halving to min_loss_scale, doubling after
//   loss_scale_window clean steps), and a skipped step changes no parameter;
// - the global gradient norm is the float64 norm and has the same bits at 1 to 4 OpenMP threads
//   (a resumed run on a machine of other cores clips the same);
// - bad input (a stage the engine cannot run, registrations that differ, a module reported twice
//   or never) is a clear error on every rank, never a hang;
// - learning rates set from outside (a script's own scheduler) replace the config's schedule;
// - fp32 steps skipped for inf gradients end the run after zrt.max_skipped_steps in a row.
#include <doctest/doctest.h>
#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "comm/mpi/left_peers.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory_ledger.h"
#include "core/shard.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/mpi_test.h"
#include "tools/plan/formulas.h"

using namespace zrt;

namespace {

// Stage 3 on the test model (three modules of 80 elements): none stays whole, two may be
// gathered at once.
constexpr const char* kStage3Limits =
    R"(, "stage3_param_persistence_threshold": 10, "stage3_max_live_parameters": 160)";

std::string config(int stage, const std::string& precision, int world, const std::string& extra = "",
                   const std::string& zeroExtra = "") {
  return detail::cat(R"({"train_batch_size": )", 2 * world,
                     R"(, "train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},)",
                     precision, extra, R"("zero_optimization": {"stage": )", stage,
                     R"(, "reduce_bucket_size": 50)", zeroExtra, "}}");
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("each rank holds exactly the ZeRO formulas' model-state bytes, as zrt-plan predicts") {
  const int world = test::worldSize(), rank = test::worldRank();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const std::uint64_t psi = test::kLayers * (test::kWidth * test::kWidth + test::kWidth);
  const std::uint64_t frozen = test::kLayers * test::kWidth;
  struct Precision {
    const char* json;
    std::uint64_t p, k;  // bytes per parameter and gradient; optimizer bytes per parameter (K)
    DType dtype;
  };
  const Precision precisions[] = {{R"("bf16": {"enabled": true},)", 2, 12, DType::BF16},
                                  {R"("fp16": {"enabled": true},)", 2, 12, DType::F16},
                                  {"", 4, 8, DType::F32}};
  for (const Precision& pr : precisions) {
    for (int stage : {0, 1, 2, 3}) {
      CAPTURE(stage);
      CAPTURE(pr.p);
      MemoryLedger ledger;
      auto device = makeDevice("host:64M", ledger);
      // Stage 3: no module stays whole, at most two of the three (80 elements each) gathered.
      const Config c = parseConfig(config(stage, pr.json, world, "", kStage3Limits), "memory test", world);
      Engine engine(c, *device, comm, test::testModel());
      // The formulas, by hand: Ψ' and Φ' padded for N' = 1 (stage 0) or N ranks.
      const int parts = stage == 0 ? 1 : world;
      const std::uint64_t psiPad = paddedLength(psi, parts, kShardAlignElements);
      const std::uint64_t frozenPad = paddedLength(frozen, parts, kShardAlignElements);
      const std::uint64_t params = pr.p * (psiPad + frozenPad) / (stage == 3 ? world : 1);
      const std::uint64_t grads = pr.p * (stage >= 2 ? psiPad / world : psiPad);
      // Stage 3 adds the gathered copies, at most the live bound: two modules' 80 elements,
      // which the second step fills (one in use, the next gathered ahead by the first's trace).
      test::train(engine, comm, 2, 2);
      CHECK(ledger.get(MemTag::GatheredParameters, MemPlace::Device).peak == (stage == 3 ? 160 * pr.p : 0));
      const std::uint64_t optim = pr.k * (stage >= 1 ? psiPad / world : psiPad);
      CHECK(ledger.get(MemTag::Parameters, MemPlace::Device).current == params);
      CHECK(ledger.get(MemTag::Gradients, MemPlace::Device).current == grads);
      CHECK(ledger.get(MemTag::OptimizerState, MemPlace::Device).current == optim);
      // zrt-plan, given the same options and counts.
      plan::ModelStateInputs in;
      static_cast<ModelStateOptions&>(in) = modelStateOptions(c, rank);
      in.trainable = psi;
      in.frozen = frozen;
      const plan::PlanLedger predicted = plan::modelStateBytes(in);
      for (MemTag tag : {MemTag::Parameters, MemTag::Gradients, MemTag::OptimizerState})
        CHECK(ledger.get(tag, MemPlace::Device).current == predicted.byTag(tag, MemPlace::Device));
      if (stage == 3) {
        plan::BufferInputs b;
        b.stage = 3;
        b.precision = pr.dtype;
        b.placement = placeModelStates(in, psi, frozen);
        b.zero = c.zero_optimization;
        b.largestTensor = test::kWidth * test::kWidth;
        CHECK(ledger.get(MemTag::GatheredParameters, MemPlace::Device).peak ==
              plan::bufferBytes(b).byTag(MemTag::GatheredParameters, MemPlace::Device));
      }
      // Nothing of the model states lands anywhere else.
      for (MemPlace place : {MemPlace::PinnedHost, MemPlace::Host, MemPlace::Nvme})
        for (MemTag tag : {MemTag::Parameters, MemTag::Gradients, MemTag::OptimizerState})
          CHECK(ledger.get(tag, place).current == 0);
      CHECK(engine.memorySummary().find("gradients") != std::string::npos);
    }
  }
}

TEST_CASE("an inf on one rank skips the step everywhere; the scale follows hysteresis and window") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  const Config c = parseConfig(
      config(1, R"("fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 2, "loss_scale_window": 3, "min_loss_scale": 64},)",
             world),
      "loss scale test", world);
  Engine engine(c, *device, comm, test::testModel());
  const std::set<int> overflowSteps = {0, 1, 2, 3, 4, 8, 9};
  test::TrainHooks hooks;
  hooks.beforeDone = [&](int step, int, int layer, TensorRef& w) {
    if (overflowSteps.count(step) && layer == 1 && comm.rank() == world - 1)
      test::storeValue(w.dtype, w.data, 3, std::numeric_limits<float>::infinity());
  };
  const auto before = test::trainedValues(engine);
  std::vector<StepReport> all = test::train(engine, comm, 1, 2, hooks);
  CHECK(test::trainedValues(engine) == before);  // the skipped step changed nothing
  hooks.firstStep = 1;
  for (const StepReport& r : test::train(engine, comm, 9, 2, hooks)) all.push_back(r);
  const double expectedScale[] = {256, 256, 128, 64, 64, 64, 64, 64, 128, 128};
  for (int s = 0; s < 10; ++s) {
    CAPTURE(s);
    CHECK(all[s].taken == (overflowSteps.count(s) == 0));
    CHECK(all[s].lossScale == expectedScale[s]);
  }
  CHECK(test::trainedValues(engine) != before);
  CHECK(engine.lossScale() == 64);
}

// The norm's sum of squares runs in 8 partial sums with a tail, and reads inf/NaN from the sum:
// a non-finite value must skip the step wherever it sits, in fp32 too (no loss scaler).
TEST_CASE("a NaN or an inf at any element of a gradient skips the step, at stages 0 and 2") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  for (int stage : {0, 2}) {
    CAPTURE(stage);
    Engine engine(parseConfig(config(stage, "", world), "non-finite test", world), *device, comm,
                  test::testModel());
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    const struct {
      int layer;
      std::size_t element;
      float value;
    } cases[] = {{0, 0, nan}, {1, 5, -inf}, {2, 63, nan}, {2, 7, inf}};
    int step = 0;
    for (const auto& c : cases) {
      CAPTURE(step);
      test::TrainHooks hooks;
      hooks.firstStep = step;
      hooks.beforeDone = [&](int, int, int layer, TensorRef& w) {
        if (layer == c.layer && comm.rank() == world - 1) test::storeValue(w.dtype, w.data, c.element, c.value);
      };
      const auto before = test::trainedValues(engine);
      const std::vector<StepReport> r = test::train(engine, comm, 1, 2, hooks);
      REQUIRE(r.size() == 1);
      CHECK_FALSE(r[0].taken);
      CHECK(std::isinf(r[0].gradNorm));
      CHECK(test::trainedValues(engine) == before);
      ++step;
    }
    test::TrainHooks clean;
    clean.firstStep = step;
    const std::vector<StepReport> r = test::train(engine, comm, 1, 2, clean);
    REQUIRE(r.size() == 1);
    CHECK(r[0].taken);
    CHECK(std::isfinite(r[0].gradNorm));
    CHECK(r[0].gradNorm > 0);
  }
}

TEST_CASE("the gradient norm has the same bits whatever the thread count, and is the float64 norm") {
  // One parameter of several of the norm's 65536-element chunks per rank, every rank writing the
  // same values, so the averaged gradient is exactly those values and its float64 norm is known.
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:256M", ledger);
  constexpr std::uint64_t kNumel = 4'000'037;
  EngineModel model;
  model.modules.push_back({"big", {{"weight", {static_cast<std::int64_t>(kNumel)}, init::normal(7, 0.02), true, 0}}});
  // Magnitudes from 1 down to 2^-19 and both signs, and each chunk's sum of another size, so adding
  // the chunks' sums in another order changes the last bits.
  auto value = [](std::uint64_t i) {
    const double chunkScale = 1.0 + 3.3 * static_cast<double>((i >> 16) % 7);
    return static_cast<float>(chunkScale * std::ldexp(std::sin(0.37 * static_cast<double>(i)), -static_cast<int>(i % 20)));
  };
  // The reference sums in long double: a plain double sum of 4M squares in a row is itself off
  // by ~1e-12.
  long double sumSq = 0;
  for (std::uint64_t i = 0; i < kNumel; ++i) sumSq += static_cast<long double>(value(i)) * value(i);
  const double expected = static_cast<double>(std::sqrt(sumSq));
  const int threadsBefore = omp_get_max_threads();
  for (int stage : {0, 2}) {
    CAPTURE(stage);
    std::vector<double> norms;
    for (int threads : {1, 2, 3, 4}) {
      CAPTURE(threads);
      omp_set_num_threads(threads);
      Engine engine(parseConfig(config(stage, "", world), "norm test", world), *device, comm, model);
      engine.beginMicroStep();
      const auto refs = engine.gradients(0);
      const double seed = engine.gradientSeed();
      for (std::uint64_t i = 0; i < kNumel; ++i)
        test::storeValue(refs[0].dtype, refs[0].data, i, static_cast<float>(value(i) * seed));
      engine.backwardDone(0);
      engine.endMicroStep();
      norms.push_back(engine.step().gradNorm);
    }
    for (double n : norms) CHECK(n == norms[0]);  // bit for bit, not approximately
    CHECK(norms[0] == doctest::Approx(expected).epsilon(1e-13));
  }
  omp_set_num_threads(threadsBefore);
}

TEST_CASE("clipping: the reported norm is the global unsharded norm and the step respects it") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  comm::MpiCommunicator self(MPI_COMM_SELF);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  const std::string clip = R"("gradient_clipping": 0.01,)";
  Engine sharded(parseConfig(config(2, "", world, clip), "clip", world), *device, comm,
                 test::testModel());
  const auto r = test::train(sharded, comm, 1, 2);
  // The same global batch on one rank, stage 0.
  Engine whole(parseConfig(detail::cat(R"({"train_batch_size": )", 2 * world,
                                       R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},)", clip,
                                       R"("zero_optimization": {"stage": 0}})"),
                           "clip", 1),
               *device, self, test::testModel());
  const auto w = test::train(whole, self, 1, 2 * world);
  CHECK(r[0].gradNorm == doctest::Approx(w[0].gradNorm).epsilon(1e-6));
  CHECK(r[0].gradNorm > 0.01);  // the clip applied
}

TEST_CASE("a config the engine cannot run is refused on every rank before anything runs") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  const std::string msg = test::messageOf([&] {
    Engine e(parseConfig(config(3, "", world, "", R"(, "offload_param": {"device": "nvme", "nvme_path": ["/tmp"]})"),
                         "offload.json", world),
             *device, comm, test::testModel());
  });
  CHECK(msg.find("offload") != std::string::npos);
  CHECK(msg.find("offload.json") != std::string::npos);
  // A config resolved for another world size.
  const std::string other = test::messageOf([&] {
    Engine e(parseConfig(config(1, "", world + 1), "w.json", world + 1), *device, comm, test::testModel());
  });
  CHECK(other.find("communicator has") != std::string::npos);
  // A parameter registered in another dtype than the config's precision (on every rank).
  EngineModel model = test::testModel();
  model.modules[2].params[0].dtype = DType::F16;
  const std::string dt = test::messageOf(
      [&] { Engine e(parseConfig(config(1, R"("bf16": {"enabled": true},)", world), "d.json", world), *device, comm, model); });
  CAPTURE(dt);
  CHECK(dt.find("'layer2/weight' is registered as fp16 but d.json trains in bf16") != std::string::npos);
  // The strict host device's one refusal (SGD without offload) is runtime_engine_strict_test's.
}

TEST_CASE("registrations that differ name the first differing parameter and the ranks") {
  const int world = test::worldSize(), rank = test::worldRank();
  ZRT_REQUIRE_RANKS(2);  // registered for 2 and 4 ranks only (CMakeLists.txt)
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  EngineModel model = test::testModel();
  if (rank == 1) model.modules[1].params[0].shape = {test::kWidth, test::kWidth + 1};
  const std::string msg = test::messageOf(
      [&] { Engine e(parseConfig(config(1, "", world), "r.json", world), *device, comm, model); });
  CAPTURE(msg);
  CHECK(msg.find("first difference at parameter #3") != std::string::npos);
  CHECK(msg.find("rank(s) 1: 'layer1/weight [8,9]") != std::string::npos);
  CHECK(msg.find("layer1/weight [8,8]") != std::string::npos);
}

TEST_CASE("a module reported twice or never is an error on every rank, not a hang") {
  const int world = test::worldSize();
  ZRT_REQUIRE_RANKS(2);  // registered for 2 and 4 ranks only (CMakeLists.txt)
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  for (int stage : {0, 2}) {
    CAPTURE(stage);
    const Config c = parseConfig(config(stage, "", world), "misuse", world);
    {
      Engine engine(c, *device, comm, test::testModel());
      test::TrainHooks never;
      never.report = [&](int, int, int layer) { return !(layer == 1 && comm.rank() == world - 1); };
      const std::string msg = test::messageOf([&] { test::train(engine, comm, 1, 2, never); });
      CAPTURE(msg);
      CHECK(msg.find("rank " + std::to_string(world - 1) + ": module 'layer1' never reported") !=
            std::string::npos);
      CHECK(msg.find("engine: a module never reported its gradients in micro-step 0 of step 1:\n  rank " +
                     std::to_string(world - 1) + ": module 'layer1'") != std::string::npos);
      CHECK(occurrences(msg, "[rank ") == 1);
    }
    {
      Engine engine(c, *device, comm, test::testModel());
      test::TrainHooks twice;
      twice.beforeDone = [&](int, int, int layer, TensorRef&) {
        if (layer == 2 && comm.rank() == 0) engine.backwardDone(2);
      };
      const std::string msg = test::messageOf([&] { test::train(engine, comm, 1, 2, twice); });
      CAPTURE(msg);
      CHECK(msg.find("rank 0: module 'layer2' reported its gradients twice") != std::string::npos);
      CHECK(msg.find("engine: a module reported its gradients twice in micro-step 0 of step 1:") !=
            std::string::npos);
      CHECK(occurrences(msg, "[rank ") == 1);
    }
  }
}

TEST_CASE("a module fetched and never released is reported as that, on every rank") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(parseConfig(config(3, "", world), "unreleased", world), *device, comm, test::testModel());
  test::TrainHooks keep;
  keep.beforeDone = [&](int, int, int layer, TensorRef&) {
    if (layer == 2 && comm.rank() == world - 1) (void)engine.parameters(2);  // one release short
  };
  const std::string msg = test::messageOf([&] { test::train(engine, comm, 1, 2, keep); });
  CAPTURE(msg);
  CHECK(msg.find("engine: modules fetched and never released in micro-step 0 of step 1:\n  rank " +
                 std::to_string(world - 1) + ": modules fetched and never released: 'layer2'") !=
        std::string::npos);
  CHECK(msg.find("gradients reported wrongly") == std::string::npos);
  CHECK(occurrences(msg, "[rank ") == 1);
}

TEST_CASE("a rank whose device is too small fails set-up on every rank, with the ledger") {
  const int world = test::worldSize(), rank = test::worldRank();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice(rank == world - 1 ? "host:1K" : "host:64M", ledger);
  std::string msg;
  bool outOfMemory = false;
  try {
    Engine e(parseConfig(config(1, "", world), "oom", world), *device, comm, test::testModel());
  } catch (const OutOfMemory& ex) {  // the failing rank's class, on every rank
    outOfMemory = true;
    msg = ex.what();
  }
  CAPTURE(msg);
  CHECK(outOfMemory);
  CHECK(msg.find("rank " + std::to_string(world - 1) + ": ") != std::string::npos);
  CHECK(msg.find("memory ledger") != std::string::npos);
  // The failing rank's own "[rank R] file:line: " is not repeated after "rank R: ".
  CHECK(occurrences(msg, "[rank ") == 1);
  CHECK(msg.find("rank " + std::to_string(world - 1) + ": [rank") == std::string::npos);
}

TEST_CASE("16-bit micro-steps add up in fp32, not in the training dtype") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  constexpr int kAccum = 4;
  constexpr std::uint64_t kN = 64;
  // bf16 keeps 8 significant bits: 1 + 2^-9 rounds back to 1, so a bf16 running sum of
  // 1, 2^-9, 2^-9, 2^-9 stays 1; in fp32 it is 1 + 3·2^-9.
  const double small = std::ldexp(1.0, -9);
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    MemoryLedger ledger;
    auto device = makeDevice("host:64M", ledger);
    const Config c = parseConfig(
        detail::cat(R"({"train_batch_size": )", kAccum * world, R"(, "gradient_accumulation_steps": )", kAccum,
                    R"(, "bf16": {"enabled": true}, "optimizer": {"type": "SGD", "params": {"lr": 0.0}},)",
                    R"("zero_optimization": {"stage": )", stage, "}}"),
        "accumulation", world);
    EngineModel model;
    model.modules.push_back({"m", {{"w", {static_cast<std::int64_t>(kN)}, init::constant(0)}}});
    Engine engine(c, *device, comm, model);
    // The accumulator: fp32, the whole padded buffer at stages 0-1, the shard at 2-3.
    const std::uint64_t padded = paddedLength(kN, stage == 0 ? 1 : world, kShardAlignElements);
    const std::uint64_t grads = stage >= 2 ? padded / world : padded;
    CHECK(ledger.get(MemTag::Gradients, MemPlace::Device).current == (2 + 4) * grads);
    for (int m = 0; m < kAccum; ++m) {
      engine.beginMicroStep();
      TensorRef g = engine.gradients(0)[0];
      for (std::uint64_t i = 0; i < kN; ++i) test::storeValue(g.dtype, g.data, i, static_cast<float>(m == 0 ? 1.0 : small));
      engine.backwardDone(0);
      engine.endMicroStep();
    }
    const StepReport r = engine.step();
    // Stages 0-1 round the fp32 sum to bf16 once for the all-reduce (1 + 2^-7); stages 2-3
    // reduce each micro-step and keep the sum in fp32.
    const double element = stage <= 1 ? 1 + std::ldexp(1.0, -7) : 1 + 3 * small;
    CHECK(r.gradNorm == doctest::Approx(std::sqrt(static_cast<double>(kN)) * element).epsilon(1e-12));
  }
}

TEST_CASE("gradients read from the caller's buffers train as those written into gradients(m)") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  // Writes g = sin(θ + 0.1·(rank + micro)) for each module, backward order, into gradients(m)
  // or into buffers of its own handed to backwardDone(m, from).
  // (The values go through host memory and, on host-strict, up into gradients(m) by a copy.)
  auto run = [&](Engine& engine, Device& device, bool own) {
    const test::DeviceIo io(device.hostReadsDeviceMemory() ? nullptr : &device);
    for (int s = 0; s < 3; ++s) {
      for (int micro = 0; micro < engine.accumulationSteps(); ++micro) {
        engine.beginMicroStep();
        for (std::size_t m = engine.numModules(); m-- > 0;) {
          const auto p = engine.parameters(m);
          const auto g = engine.gradients(m);
          std::vector<std::vector<char>> values(g.size()), keep(g.size());
          std::vector<const void*> from(g.size(), nullptr);
          for (std::size_t t = 0; t < g.size(); ++t) {
            if (!g[t].data) continue;  // frozen
            const void* param = io.down(p[t], keep[t]);
            values[t].assign(g[t].numel * dtypeSize(g[t].dtype), 0);
            for (std::size_t i = 0; i < g[t].numel; ++i)
              test::storeValue(g[t].dtype, values[t].data(), i,
                               static_cast<float>(std::sin(test::loadValue(p[t].dtype, param, i) +
                                                           0.1 * (comm.rank() + micro))));
            if (own) from[t] = values[t].data();
            else if (io.device) io.up(g[t].data, values[t]);
            else std::memcpy(g[t].data, values[t].data(), values[t].size());
          }
          if (own) engine.backwardDone(m, from);
          else engine.backwardDone(m);
          engine.release(m);
        }
        engine.endMicroStep();
      }
      engine.step();
    }
    return test::trainedValues(engine);
  };
  for (const char* dev : {"host:64M", "host-strict:64M"}) {
    for (const char* precision : {"", R"("bf16": {"enabled": true},)"}) {
      for (int stage : {0, 1, 2, 3}) {
        CAPTURE(dev);
        CAPTURE(precision);
        CAPTURE(stage);
        const Config c = parseConfig(
            detail::cat(R"({"train_batch_size": )", 2 * world, R"(, "gradient_accumulation_steps": 2,)",
                        R"( "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},)", precision,
                        R"("zero_optimization": {"stage": )", stage, R"(, "reduce_bucket_size": 50}})"),
            "from", world);
        MemoryLedger ledgerA, ledgerB;
        auto deviceA = makeDevice(dev, ledgerA);
        auto deviceB = makeDevice(dev, ledgerB);
        Engine written(c, *deviceA, comm, test::testModel());
        Engine handed(c, *deviceB, comm, test::testModel());
        CHECK(run(handed, *deviceB, true) == run(written, *deviceA, false));
      }
    }
  }
}

namespace {

// One step whose gradients are gradient(θ) (a host device: the engine's buffers are written
// directly).
StepReport stepWith(Engine& engine, float (*gradient)(float)) {
  engine.beginMicroStep();
  for (std::size_t m = engine.numModules(); m-- > 0;) {
    const auto p = engine.parameters(m);
    const auto g = engine.gradients(m);
    for (std::size_t t = 0; t < g.size(); ++t)
      for (std::size_t i = 0; g[t].data && i < g[t].numel; ++i)
        test::storeValue(g[t].dtype, g[t].data, i, gradient(test::loadValue(p[t].dtype, p[t].data, i)));
    engine.backwardDone(m);
    engine.release(m);
  }
  engine.endMicroStep();
  return engine.step();
}

float sine(float x) { return std::sin(x); }
float infinite(float) { return std::numeric_limits<float>::infinity(); }

}  // namespace

TEST_CASE("learning rates set from outside replace the schedule, group by group") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  auto step = [](Engine& engine) { return stepWith(engine, sine); };
  for (int stage : {0, 3}) {
    CAPTURE(stage);
    // WarmupLR would run step 0 at 0.002; the rates set win.
    const Config c = parseConfig(config(stage, "", world,
                                        R"("scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.002,)"
                                        R"( "warmup_max_lr": 0.01, "warmup_num_steps": 5}},)"),
                                 "lr", world);
    MemoryLedger ledger;
    auto device = makeDevice("host:64M", ledger);
    Engine engine(c, *device, comm, test::testModel(0.005));
    CHECK(engine.learningRates() == std::vector<double>{0.002, 0.002 * 0.005 / 0.001});
    const auto before = test::trainedValues(engine);
    engine.setLearningRates({0.0, 0.0});
    CHECK(engine.learningRates() == std::vector<double>{0.0, 0.0});
    CHECK(step(engine).lr == 0.0);
    CHECK(test::trainedValues(engine) == before);  // lr 0: no move, weight decay included
    engine.setLearningRates({0.01, 0.0});
    step(engine);
    const auto after = test::trainedValues(engine);
    for (int l = 0; l < test::kLayers; ++l) {
      CHECK(after[2 * l] != before[2 * l]);          // weights (group 0) moved
      CHECK(after[2 * l + 1] == before[2 * l + 1]);  // biases (group 1, lr 0) did not
    }
    CHECK_THROWS_AS(engine.setLearningRates({0.01}), InvalidArgument);
    CHECK_THROWS_AS(engine.setLearningRates({-1.0, 0.0}), InvalidArgument);
    CHECK_THROWS_AS(engine.setLearningRates({std::nan(""), 0.0}), InvalidArgument);
  }
}

TEST_CASE("fp32 steps skipped for inf gradients are said, and zrt.max_skipped_steps in a row end the run") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const Config c = parseConfig(config(2, "", world, R"("zrt": {"max_skipped_steps": 3},)"), "skips", world);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(c, *device, comm, test::testModel());
  CHECK(!stepWith(engine, infinite).taken);
  CHECK(!stepWith(engine, infinite).taken);
  CHECK(stepWith(engine, sine).taken);  // a taken step starts the count again
  CHECK(!stepWith(engine, infinite).taken);
  CHECK(!stepWith(engine, infinite).taken);
  std::string msg;
  try {
    stepWith(engine, infinite);
  } catch (const Error& e) {
    msg = e.what();
  }
  CAPTURE(msg);
  CHECK(msg.find("3 optimizer steps in a row skipped") != std::string::npos);
  CHECK(msg.find("steps 4-6") != std::string::npos);
  CHECK(msg.find("zrt.max_skipped_steps 3") != std::string::npos);
}

// Last in this file: it leaves the process marked as having left its peers (comm/mpi/left_peers.h).
TEST_CASE("an error every rank agreed on unwinds without the left-peers warning") {
  const int world = test::worldSize();
  ZRT_REQUIRE_RANKS(2);
  // This rank's stderr goes to a file while the error unwinds through the Engine and the
  // communicator (whose frees are collective, so they are skipped).
  char path[] = "/tmp/zrt_agreed_unwind_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fd, STDERR_FILENO);
  std::string msg;
  try {
    comm::MpiCommunicator comm(MPI_COMM_WORLD);
    MemoryLedger ledger;
    auto device = makeDevice("host:64M", ledger);
    Engine engine(parseConfig(config(2, "", world), "agreed", world), *device, comm, test::testModel());
    test::TrainHooks never;
    never.report = [&](int, int, int layer) { return !(layer == 1 && comm.rank() == 0); };
    test::train(engine, comm, 1, 2, never);
  } catch (const InvalidArgument& e) {
    msg = e.what();
  }
  logWarning("probe: this rank's stderr was captured");
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::string captured;
  char buf[4096];
  for (ssize_t n; (n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(captured.size()))) > 0;)
    captured.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  ::unlink(path);
  CAPTURE(msg);
  CAPTURE(captured);
  CHECK(msg.find("rank 0: module 'layer1' never reported") != std::string::npos);
  CHECK(comm::leftPeers());  // the collective frees were skipped, as for any unwinding
  CHECK(captured.find("probe: this rank's stderr was captured") != std::string::npos);
  CHECK(captured.find("unwinding") == std::string::npos);
}
