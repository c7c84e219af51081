// A complete training loop that embeds the ZRT Engine, built against the installed package only
// (docs/engine.md walks through it). It fits a two-module model, y = W2 tanh(W1 x + b1) + b2, to
// a fixed target function, data-parallel over every rank of MPI_COMM_WORLD, with whatever ZeRO
// stage and precision the DeepSpeed config gives (argv[1], else the built-in one below).
//   mpirun -np 2 ./zrt_train_example [config.json]
#include <zrt/comm/mpi/mpi_communicator.h>
#include <zrt/comm/mpi_env.h>
#include <zrt/core/config/config.h>
#include <zrt/core/device.h>
#include <zrt/runtime/engine.h>
#include <zrt/runtime/gathered_parameters.h>
#include <zrt/runtime/state_dict.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace {

constexpr int kIn = 4, kHidden = 16;

const char* kConfig = R"({
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 8,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.01, "warmup_num_steps": 10}},
  "gradient_clipping": 1.0,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2}
})";

// Sample i of the data: x in [-1, 1]^4, target sin(x0) + x1 * x2 - x3.
void sample(long i, float* x, float& t) {
  for (int k = 0; k < kIn; ++k) x[k] = static_cast<float>(std::sin(0.37 * i + 1.3 * k));
  t = std::sin(x[0]) + x[1] * x[2] - x[3];
}

// The model's output for x, keeping the hidden activations in `a` for backward.
float forward(const zrt::GatheredParameters& h, const zrt::GatheredParameters& o, const float* x, float* a) {
  float y = o[1].load(0);
  for (int j = 0; j < kHidden; ++j) {
    float z = h[1].load(j);
    for (int k = 0; k < kIn; ++k) z += h[0].load(j * kIn + k) * x[k];
    a[j] = std::tanh(z);
    y += o[0].load(j) * a[j];
  }
  return y;
}

}  // namespace

int main(int argc, char** argv) {
  zrt::comm::MpiEnvironment mpi(&argc, &argv);
  int status = 0;
  try {
    zrt::comm::MpiCommunicator comm(MPI_COMM_WORLD);
    const zrt::Config config = argc > 1 ? zrt::loadConfig(argv[1], comm.size())
                                        : zrt::parseConfig(kConfig, "built-in config", comm.size());
    zrt::MemoryLedger ledger;
    auto device = zrt::makeDevice(zrt::deviceSpec(config), ledger);

    // The model, module by module: the same registration on every rank.
    zrt::EngineModel model;
    model.modules.push_back({"hidden", {{"weight", {kHidden, kIn}, zrt::init::normal(1, 0.5)},
                                        {"bias", {kHidden}, zrt::init::constant(0)}}});
    model.modules.push_back({"head", {{"weight", {1, kHidden}, zrt::init::normal(2, 0.25)},
                                      {"bias", {1}, zrt::init::constant(0)}}});
    zrt::Engine engine(config, *device, comm, model);

    const long micro = config.train_micro_batch_size_per_gpu;
    const long global = config.train_batch_size;
    double first = 0, last = 0;
    for (int step = 0; step < 150; ++step) {
      double loss = 0;
      for (int m = 0; m < engine.accumulationSteps(); ++m) {
        engine.beginMicroStep();
        std::vector<float> gW1(kHidden * kIn, 0), gb1(kHidden, 0), gW2(kHidden, 0);
        float gb2 = 0;
        const double seed = engine.gradientSeed();  // loss scale / accumulation steps
        {
          // Both modules' parameters for this scope (at stage 3: gathered here, released at its
          // end, even if the forward throws). load/store read and write floats in any dtype.
          const zrt::GatheredParameters h(engine, 0), o(engine, 1);
          for (long b = 0; b < micro; ++b) {
            // This rank's samples of the step: the global batch is split over micro-steps and ranks.
            const long i = step * global + (m * comm.size() + comm.rank()) * micro + b;
            float x[kIn], t, a[kHidden];
            sample(i, x, t);
            const float y = forward(h, o, x, a);
            const float d = static_cast<float>((y - t) / micro);  // d(mean 0.5 (y-t)^2)/dy
            loss += 0.5 * (y - t) * (y - t) / micro / engine.accumulationSteps();
            gb2 += static_cast<float>(seed * d);
            for (int j = 0; j < kHidden; ++j) {
              gW2[j] += static_cast<float>(seed * d * a[j]);
              const float dz = d * o[0].load(j) * (1 - a[j] * a[j]);
              gb1[j] += static_cast<float>(seed * dz);
              for (int k = 0; k < kIn; ++k) gW1[j * kIn + k] += static_cast<float>(seed * dz * x[k]);
            }
          }
        }
        // Backward runs last module first; each module's gradients go to the engine as soon
        // as they exist, so their buckets reduce while earlier modules still compute.
        const auto go = engine.gradients(1);
        for (int j = 0; j < kHidden; ++j) go[0].store(j, gW2[j]);
        go[1].store(0, gb2);
        engine.backwardDone(1);
        const auto gh = engine.gradients(0);
        for (int j = 0; j < kHidden * kIn; ++j) gh[0].store(j, gW1[j]);
        for (int j = 0; j < kHidden; ++j) gh[1].store(j, gb1[j]);
        engine.backwardDone(0);
        engine.endMicroStep();
      }
      const zrt::StepReport r = engine.step();
      double global_loss = loss;  // this rank's; average over ranks for the printout
      MPI_Allreduce(&loss, &global_loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      global_loss /= comm.size();
      if (step == 0) first = global_loss;
      last = global_loss;
      if (comm.rank() == 0 && step % 25 == 0)
        std::printf("step %3d  loss %.4f  grad norm %.3f  lr %.4f  %s\n", step, global_loss,
                    r.gradNorm, r.lr, r.taken ? "" : "(skipped)");
    }
    // A forward-only evaluation between steps (no micro-step needed) on samples never trained
    // on, and the whole model by name on every rank (collective: every rank calls both).
    double evalLoss = 0;
    {
      const zrt::GatheredParameters h(engine, 0), o(engine, 1);
      for (long i = 0; i < 64; ++i) {
        float x[kIn], t, a[kHidden];
        sample(1'000'000 + i, x, t);
        const float y = forward(h, o, x, a);
        evalLoss += 0.5 * (y - t) * (y - t) / 64;
      }
    }
    const std::vector<zrt::StateDictEntry> weights = zrt::stateDict(engine);
    if (comm.rank() == 0) {
      std::printf("held-out loss %.4f; state dict:", evalLoss);
      for (const zrt::StateDictEntry& w : weights) std::printf(" %s (%zu)", w.name.c_str(), w.values.size());
      std::printf("\n");
      std::printf("%s", engine.memorySummary().c_str());
      std::printf("loss %.4f -> %.4f: %s\n", first, last,
                  last < 0.5 * first ? "example ok" : "example FAILED: loss did not halve");
    }
    status = last < 0.5 * first ? 0 : 1;
  } catch (const std::exception& e) {
    // A bad config, a model that does not fit, a misused engine: the engine raised the same
    // error on every rank, so each rank says it and exits non-zero.
    std::fprintf(stderr, "zrt_train_example: %s\n", e.what());
    status = 2;
  }
  return status;
}
