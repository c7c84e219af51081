// zrt-offload-scale: trains a model whose full training state does not fit in this machine's
// memory, with the optimizer state on NVMe and the parameter shard in host memory, or with
// --param-nvme in swap files too (ZeRO stage 3, the `host` device), under mpirun. The task is deliberately cheap to compute so the run
// measures the offload path: every parameter w is pulled towards a target, loss = mean((w − t)²)
// over all parameters (t a fixed pattern), whose gradient 2(w − t)/Ψ the "backward" writes.
// It prints per step the loss, the step time, the optimizer's wait on NVMe and the I/O rate, and
// at the end the ledger; run it under /usr/bin/time -v for the peak RSS (tools/offload-bench/
// scale.sh does).
//   mpirun -np 2 zrt-offload-scale --params 2e9 --nvme-path /work/swap --steps 4
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/timing.h"
#include "core/units.h"
#include "runtime/engine.h"

namespace {

float targetOf(std::uint64_t i) { return 0.01f * static_cast<float>(static_cast<int>(i % 17) - 8); }

float load(const zrt::TensorRef& t, std::uint64_t i) {
  const auto* h = static_cast<const std::uint16_t*>(t.data);
  return t.dtype == zrt::DType::BF16 ? zrt::bf16ToFloat(h[i]) : static_cast<const float*>(t.data)[i];
}

}  // namespace

int main(int argc, char** argv) {
  zrt::comm::MpiEnvironment mpi(&argc, &argv);
  std::string params = "2e9", nvmePath = ".", subGroup = "5e7", device = "host:64G";
  int modules = 40, steps = 4, buffers = 4;
  bool paramNvme = false;
  CLI::App app{"zrt-offload-scale: a model larger than memory, optimizer on NVMe"};
  app.add_option("--params", params, "parameters in all");
  app.add_option("--modules", modules, "modules (each gathered whole at stage 3)")->check(CLI::Range(1, 100000));
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 100000));
  app.add_option("--nvme-path", nvmePath, "directory for the swap files");
  app.add_option("--sub-group", subGroup, "sub_group_size, elements");
  app.add_option("--buffers", buffers, "offload_optimizer.buffer_count")->check(CLI::Range(1, 64));
  app.add_option("--device", device, "device spec");
  app.add_flag("--param-nvme", paramNvme, "the parameter shard in swap files too (offload_param nvme, max_in_cpu 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    zrt::comm::MpiCommunicator comm(MPI_COMM_WORLD);
    const int world = comm.size(), rank = comm.rank();
    const std::uint64_t total = zrt::parseBytes(params, "--params");
    const std::uint64_t perModule = total / static_cast<std::uint64_t>(modules);
    zrt::EngineModel model;
    for (int m = 0; m < modules; ++m)
      model.modules.push_back({"block" + std::to_string(m),
                               {{"weight", {static_cast<std::int64_t>(perModule)}, zrt::init::constant(0.0f)}}});
    const zrt::Config config = zrt::parseConfig(
        zrt::detail::cat(R"({"train_batch_size": )", world, R"(, "bf16": {"enabled": true},)",
                         R"("optimizer": {"type": "AdamW", "params": {"lr": 0.002}},)",
                         R"("zero_optimization": {"stage": 3, "sub_group_size": ")", subGroup,
                         R"(", "reduce_bucket_size": 5e7, "stage3_max_live_parameters": )", 2 * perModule,
                         paramNvme ? zrt::detail::cat(R"(, "offload_param": {"device": "nvme", "max_in_cpu": 0, )",
                                                      R"("buffer_size": )", perModule, R"(, "nvme_path": [")",
                                                      nvmePath, R"("]},)")
                                   : std::string(R"(, "offload_param": {"device": "cpu"},)"),
                         R"("offload_optimizer": {"device": "nvme", "nvme_path": [")", nvmePath,
                         R"("], "buffer_count": )", buffers, "}}}"),
        "zrt-offload-scale", world);
    zrt::MemoryLedger ledger;
    auto dev = zrt::makeDevice(device, ledger);
    const auto t0 = std::chrono::steady_clock::now();
    zrt::Engine engine(config, *dev, comm, std::move(model));
    if (rank == 0)
      std::printf("zrt-offload-scale: %s parameters (%llu GB of training state at 16 B each) in %d modules, "
                  "%d ranks; set-up %.1f s\n",
                  params.c_str(), static_cast<unsigned long long>(total * 16 / 1'000'000'000), modules, world,
                  zrt::secondsSince(t0));
    for (int s = 0; s < steps; ++s) {
      const auto ts = std::chrono::steady_clock::now();
      double sum = 0;
      std::uint64_t at = 0;  // global index of the module's first element
      engine.beginMicroStep();
      // Every rank computes the loss over all parameters (identical), and the gradient of its
      // share: the global gradient is 2(w − t)/Ψ, averaged over ranks by the engine.
      for (std::size_t m = 0; m < engine.numModules(); ++m, at += perModule) {
        const auto p = engine.parameters(m);
        for (std::uint64_t i = 0; i < p[0].numel; ++i) {
          const double d = load(p[0], i) - targetOf(at + i);
          sum += d * d;
        }
        engine.release(m);
      }
      at = total - perModule;
      for (std::size_t m = engine.numModules(); m-- > 0; at -= perModule) {
        const auto p = engine.parameters(m);
        const auto g = engine.gradients(m);
        auto* out = static_cast<std::uint16_t*>(g[0].data);
        const double k = 2.0 * engine.gradientSeed() / static_cast<double>(total);
        for (std::uint64_t i = 0; i < p[0].numel; ++i)
          out[i] = zrt::floatToBf16(static_cast<float>(k * (load(p[0], i) - targetOf(at + i)) * 1e6));
        engine.backwardDone(m);
        engine.release(m);
      }
      engine.endMicroStep();
      const zrt::StepReport r = engine.step();
      const double secs = zrt::secondsSince(ts);
      if (rank == 0)
        std::printf("step %d  loss %.6e  step %.1f s  optimizer %.1f s (waited on NVMe %.1f s)  "
                    "NVMe, all ranks: %.2f GB/s\n",
                    s, sum / static_cast<double>(total), secs, r.optimizerSeconds, r.ioSeconds,
                    2.0 * 12.0 * static_cast<double>(total) / r.optimizerSeconds / 1e9);
      std::fflush(stdout);
    }
    if (rank == 0) std::printf("%s", engine.memorySummary().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-offload-scale: %s\n", e.what());
    return 2;
  }
  return 0;
}
