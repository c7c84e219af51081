// zrt-engine-bench: one training step of the Engine per ZeRO stage, side by side, under
// mpirun. For each stage it runs the same steps twice in one process: through the real
// communicator and through one that moves nothing (comm/null), so
//   comm not hidden = step time (real) - step time (no communication)
// is the communication the step paid for. It prints per-rank peak bytes by tag from the ledger
// (the largest over ranks), step time and its split.
// The model: --params parameters in --modules equal modules (one weight tensor and a bias
// each). The caller's compute is synthetic and says so: forward reads every parameter once and
// backward writes each gradient as a copy of its parameter (one read and one write per element,
// the least any backward does), so the figures are the engine's own work (bucket copies,
// reductions, the optimizer, the gathers) against that floor, not a model's FLOPs.
// Stage 3 runs twice: with the trace's prefetch ("3") and without ("3 no-pf",
// stage3_prefetch_bucket_size 0), with at most --max-live parameters gathered at once.
// With --param-nvme DIR, stage 3 also runs with the optimizer on the CPU and the parameter
// shard in host memory ("3 p-cpu"), in swap files under DIR read ahead through 5 staging
// buffers ("3 p-nvme"), and through 1 ("3 p-nvme b1": each read starts only when its gather is
// due); "read wait" is the time fetches waited for NVMe reads. --passes N makes the synthetic
// forward read each parameter N times (more compute for the reads to hide behind).
// --divergence-cost adds, per row, the step with the ranks' divergence check off
// (zrt.divergence_timeout_s 0: no call bookkeeping, no probe) beside the step with it on (the
// default), each the best of --cost-runs alternating runs (3), and the check's cost in percent.
// A whole step varies by a few percent between engines on a shared machine, more than the check
// costs, so it also times the check's bookkeeping alone (a label, a blocked wait; tracked and
// not) and charges each step's count of them: the cost that the step comparison cannot resolve.
//   mpirun -np 2 zrt-engine-bench --params 1e8 --stages 0,1,2,3
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/caller_label.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "comm/null/null_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/timing.h"
#include "core/units.h"
#include "runtime/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
using zrt::MemPlace;
using zrt::MemTag;

struct Options {
  std::string params = "1e8";
  int modules = 12;
  std::vector<int> stages{0, 1, 2, 3};
  std::string maxLive = "2.5e7";
  int steps = 3;
  std::string precision = "bf16";
  std::string device = "host:16G";
  std::string bucket = "5e7";
  std::string paramNvme;  // a directory: the stage-3 parameter-offload rows
  int passes = 1;
  bool divergenceCost = false;
  int costRuns = 3;  // engines per side (check on, check off) in --divergence-cost
};

// One row: a stage, with or without the trace's prefetch, and where the parameters live.
struct Run {
  int stage = 0;
  bool prefetch = true;
  std::string offload;  // zero_optimization keys added to the config
  std::string label;
};

struct Timing {
  double step = 0, compute = 0, comm = 0, optimizer = 0;
  std::int64_t onDemand = 0;  // stage 3: gathers the step waited for on demand
  double readWait = 0;        // offload_param nvme: fetches waiting for reads
  std::int64_t readsAhead = 0;
};

zrt::EngineModel benchModel(std::uint64_t total, int modules) {
  zrt::EngineModel m;
  const std::uint64_t width = 1024;
  const std::uint64_t perModule = std::max<std::uint64_t>(total / static_cast<std::uint64_t>(modules), width);
  for (int i = 0; i < modules; ++i) {
    zrt::ModuleSpec mod{"block" + std::to_string(i), {}};
    mod.params.push_back({"weight", {static_cast<std::int64_t>(perModule / width - 1), static_cast<std::int64_t>(width)},
                          zrt::init::normal(static_cast<std::uint64_t>(i) + 1, 0.02)});
    mod.params.push_back({"bias", {static_cast<std::int64_t>(width)}, zrt::init::constant(0)});
    m.modules.push_back(std::move(mod));
  }
  return m;
}

// Reads every byte of a tensor (a sum of 64-bit words, so the compiler cannot skip it).
std::uint64_t readAll(const zrt::TensorRef& t) {
  const auto* w = static_cast<const std::uint64_t*>(t.data);
  const std::size_t words = t.numel * zrt::dtypeSize(t.dtype) / 8;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < words; ++i) sum += w[i];
  return sum;
}

volatile std::uint64_t sink = 0;

Timing runSteps(zrt::Engine& engine, int steps, int passes, MPI_Comm sync) {
  Timing best{1e30, 0, 0, 0};
  for (int s = 0; s < steps + 1; ++s) {  // the first step warms up and is not counted
    ZRT_CHECK_MPI(MPI_Barrier(sync));
    const auto t0 = Clock::now();
    for (int m = 0; m < engine.accumulationSteps(); ++m) {
      engine.beginMicroStep();
      for (std::size_t mod = 0; mod < engine.numModules(); ++mod) {  // the synthetic forward
        for (const zrt::TensorRef& t : engine.parameters(mod))
          for (int k = 0; k < passes; ++k) sink = sink + readAll(t);
        engine.release(mod);
      }
      for (std::size_t mod = engine.numModules(); mod-- > 0;) {
        const auto p = engine.parameters(mod);
        const auto g = engine.gradients(mod);
        for (std::size_t t = 0; t < p.size(); ++t)  // the synthetic backward: g = θ
          std::memcpy(g[t].data, p[t].data, p[t].numel * zrt::dtypeSize(p[t].dtype));
        engine.backwardDone(mod);
        engine.release(mod);
      }
      engine.endMicroStep();
    }
    const zrt::StepReport r = engine.step();
    double wall = zrt::secondsSince(t0);
    ZRT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &wall, 1, MPI_DOUBLE, MPI_MAX, sync));
    if (s > 0 && wall < best.step)
      best = {wall, r.computeSeconds, r.commSeconds, r.optimizerSeconds, r.gathersOnDemand,
              r.paramReadWaitSeconds, r.paramReadsAhead};
  }
  return best;
}

// The divergence check's own work on the step's path, timed alone: what a label (the Engine's
// calls, the micro-step's span) and a blocked wait cost with the activity tracked (the check on)
// and untracked (off), in nanoseconds, the best of 5 loops. The step-to-step spread of a whole
// step on a shared machine is a few percent, far above this; entries per step times the
// difference is the cost the check adds to a step.
struct BookkeepingNs {
  double labelOff, labelOn, blockedOff, blockedOn;
};

double nsPer(int n, const auto& body) {
  double best = 1e30;
  for (int loop = 0; loop < 5; ++loop) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) body(i);
    best = std::min(best, zrt::secondsSince(t0) * 1e9 / n);
  }
  return best;
}

BookkeepingNs timeBookkeeping(zrt::comm::Communicator& comm) {
  using zrt::comm::CallerLabel;
  constexpr int n = 200000;
  auto label = [](int i) { const CallerLabel l("Engine::parameters(module 'block7'), micro-step " + std::to_string(i)); };
  auto blocked = [](int i) { const CallerLabel::Blocked b(0, static_cast<std::uint64_t>(i)); };
  comm.setDivergenceTimeout(std::chrono::milliseconds(0));  // the last tracker: activity untracked
  BookkeepingNs ns{};
  ns.labelOff = nsPer(n, label);
  ns.blockedOff = nsPer(n, blocked);
  CallerLabel::trackActivity(1);
  ns.labelOn = nsPer(n, label);
  ns.blockedOn = nsPer(n, blocked);
  CallerLabel::trackActivity(-1);
  return ns;
}

std::uint64_t peakOverRanks(const zrt::MemoryLedger& ledger, MemTag tag, MPI_Comm sync) {
  std::uint64_t mine = 0;
  for (MemPlace place : {MemPlace::Device, MemPlace::PinnedHost, MemPlace::Host})
    mine += ledger.get(tag, place).peak;
  std::uint64_t most = 0;
  ZRT_CHECK_MPI(MPI_Allreduce(&mine, &most, 1, MPI_UINT64_T, MPI_MAX, sync));
  return most;
}

std::string configFor(const Options& o, const Run& run, int world, bool divergenceCheck = true) {
  const int stage = run.stage;
  const bool prefetch = run.prefetch;
  std::string precision;
  if (o.precision == "bf16") precision = R"("bf16": {"enabled": true},)";
  if (o.precision == "fp16") precision = R"("fp16": {"enabled": true},)";
  return zrt::detail::cat(R"({"train_batch_size": )", world,
                          R"(, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},)", precision,
                          R"("zero_optimization": {"stage": )", stage, R"(, "reduce_bucket_size": ")",
                          o.bucket, R"(", "allgather_bucket_size": ")", o.bucket,
                          R"(", "overlap_comm": true, "stage3_max_live_parameters": ")", o.maxLive,
                          R"(", "stage3_prefetch_bucket_size": )", prefetch ? "50000000" : "0", run.offload,
                          "}", divergenceCheck ? "" : R"(, "zrt": {"divergence_timeout_s": 0})", "}");
}

}  // namespace

int main(int argc, char** argv) {
  zrt::comm::MpiEnvironment mpi(&argc, &argv);
  Options o;
  CLI::App app{"zrt-engine-bench: one Engine step per ZeRO stage, with and without communication"};
  app.add_option("--params", o.params, "parameters in all (1e8, or with binary suffixes: 64M)");
  app.add_option("--modules", o.modules, "modules the parameters are split into")->check(CLI::Range(1, 100000));
  app.add_option("--stages", o.stages, "ZeRO stages to run")->delimiter(',')->check(CLI::Range(0, 3));
  app.add_option("--max-live", o.maxLive, "stage3_max_live_parameters (elements gathered at once)");
  app.add_option("--steps", o.steps, "timed steps per stage (the best is shown)")->check(CLI::Range(1, 1000));
  app.add_option("--precision", o.precision, "bf16, fp16 or fp32")->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--device", o.device, "device spec (host:<capacity>)");
  app.add_option("--bucket", o.bucket, "reduce and all-gather bucket size, elements");
  app.add_option("--param-nvme", o.paramNvme, "directory: also run stage 3 with the parameters on NVMe");
  app.add_option("--passes", o.passes, "reads of each parameter in the synthetic forward")->check(CLI::Range(1, 1000));
  app.add_flag("--divergence-cost", o.divergenceCost,
               "also time each row with the ranks' divergence check off, and print its cost");
  app.add_option("--cost-runs", o.costRuns,
                 "with --divergence-cost: engines per side, check on and off (the best step of all is kept)")
      ->check(CLI::Range(1, 100));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    zrt::comm::MpiCommunicator comm(MPI_COMM_WORLD);
    const int world = comm.size(), rank = comm.rank();
    zrt::comm::NullCommunicator none(rank, world);
    const std::uint64_t total = zrt::parseBytes(o.params, "--params");
    if (rank == 0) {
      std::printf("zrt-engine-bench: %s parameters in %d modules, %s, %d ranks, device %s, buckets %s\n",
                  o.params.c_str(), o.modules, o.precision.c_str(), world, o.device.c_str(), o.bucket.c_str());
      std::printf("synthetic backward (g = theta: one read, one write per element); best of %d steps\n",
                  o.steps);
      std::printf("stage 3: at most %s parameters gathered at once (stage3_max_live_parameters)\n",
                  o.maxLive.c_str());
      std::printf("%-12s %9s %9s %9s | %9s %9s %9s %9s %9s %9s | %10s %10s %10s %10s %10s %10s\n", "stage",
                  "step s", "no-comm s", "not hid s", "compute s", "comm s", "optim s", "on-demand",
                  "read wait", "read ahd", "params", "gathered", "grads", "optimizer", "buckets", "other");
    }
    std::vector<Run> runs;
    for (int stage : o.stages) {
      runs.push_back({stage, true, "", std::to_string(stage)});
      if (stage != 3) continue;
      runs.push_back({stage, false, "", "3 no-pf"});
      if (o.paramNvme.empty()) continue;
      const std::string cpuOptimizer = R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";
      auto nvme = [&](int buffers) {
        return zrt::detail::cat(cpuOptimizer, R"(, "offload_param": {"device": "nvme", "max_in_cpu": 0, )",
                                R"("pin_memory": true, "buffer_count": )", buffers, R"(, "nvme_path": [")",
                                o.paramNvme, R"("]})");
      };
      runs.push_back({stage, true, cpuOptimizer + R"(, "offload_param": {"device": "cpu", "pin_memory": true})",
                      "3 p-cpu"});
      runs.push_back({stage, true, nvme(5), "3 p-nvme"});
      runs.push_back({stage, true, nvme(1), "3 p-nvme b1"});
    }
    struct CostRow {
      std::string label;
      double on, off;  // step seconds with the divergence check on and off
      double entries;  // labels, spans and blocked waits per step, check on
    };
    std::vector<CostRow> costRows;
    for (const Run& run : runs) {
      const zrt::Config config = zrt::parseConfig(configFor(o, run, world), "engine-bench", world);
      Timing real, silent;
      std::uint64_t peaks[6];
      {
        zrt::MemoryLedger ledger;
        auto device = zrt::makeDevice(o.device, ledger);
        zrt::Engine engine(config, *device, comm, benchModel(total, o.modules));
        real = runSteps(engine, o.steps, o.passes, MPI_COMM_WORLD);
        const MemTag tags[] = {MemTag::Parameters, MemTag::GatheredParameters, MemTag::Gradients,
                               MemTag::OptimizerState, MemTag::CommBuckets, MemTag::Other};
        for (int t = 0; t < 6; ++t) peaks[t] = peakOverRanks(ledger, tags[t], MPI_COMM_WORLD);
      }
      {
        zrt::MemoryLedger ledger;
        auto device = zrt::makeDevice(o.device, ledger);
        zrt::Engine engine(config, *device, none, benchModel(total, o.modules));
        silent = runSteps(engine, o.steps, o.passes, MPI_COMM_WORLD);
      }
      if (o.divergenceCost) {
        // Alternating engines, check on and off, so that drift on a noisy machine falls on both.
        const zrt::Config off = zrt::parseConfig(configFor(o, run, world, false), "engine-bench", world);
        double best[2] = {real.step, 1e30};
        double entries = 0;
        for (int round = 0; round < 2 * o.costRuns - 1; ++round) {
          const bool on = round % 2 == 1;
          zrt::MemoryLedger ledger;
          auto device = zrt::makeDevice(o.device, ledger);
          zrt::Engine engine(on ? config : off, *device, comm, benchModel(total, o.modules));
          const std::uint64_t before = zrt::comm::CallerLabel::activity().entries;
          best[on ? 0 : 1] = std::min(best[on ? 0 : 1], runSteps(engine, o.steps, o.passes, MPI_COMM_WORLD).step);
          if (on)
            entries = static_cast<double>(zrt::comm::CallerLabel::activity().entries - before) / (o.steps + 1);
        }
        costRows.push_back({run.label, best[0], best[1], entries});
      }
      if (rank == 0) {
        std::printf("%-12s %9.3f %9.3f %9.3f | %9.3f %9.3f %9.3f %9lld %9.3f %9lld | %10s %10s %10s %10s %10s %10s\n",
                    run.label.c_str(), real.step, silent.step, std::max(0.0, real.step - silent.step),
                    real.compute, real.comm, real.optimizer, static_cast<long long>(real.onDemand),
                    real.readWait, static_cast<long long>(real.readsAhead),
                    zrt::formatBytes(peaks[0]).c_str(), zrt::formatBytes(peaks[1]).c_str(),
                    zrt::formatBytes(peaks[2]).c_str(), zrt::formatBytes(peaks[3]).c_str(),
                    zrt::formatBytes(peaks[4]).c_str(), zrt::formatBytes(peaks[5]).c_str());
        std::fflush(stdout);
      }
    }
    if (!costRows.empty()) {
      const BookkeepingNs ns = timeBookkeeping(comm);
      // Every entry charged at the dearer difference of the two kinds: an upper bound.
      const double perEntry = std::max({ns.labelOn - ns.labelOff, ns.blockedOn - ns.blockedOff, 0.0});
      if (rank == 0) {
        std::printf("\nthe ranks' divergence check (zrt.divergence_timeout_s), best of %d steps in %d runs each:\n",
                    o.steps, o.costRuns);
        std::printf("%-12s %11s %11s %9s | %9s %12s %9s\n", "stage", "on: step s", "off: step s", "cost %",
                    "entries", "bookkeep us", "of step %");
        for (const CostRow& row : costRows)
          std::printf("%-12s %11.4f %11.4f %+9.2f | %9.0f %12.2f %9.4f\n", row.label.c_str(), row.on, row.off,
                      100.0 * (row.on / row.off - 1.0), row.entries, row.entries * perEntry / 1e3,
                      100.0 * row.entries * perEntry * 1e-9 / row.off);
        std::printf("its bookkeeping alone, ns per entry (tracked / untracked): label %.1f / %.1f, blocked wait "
                    "%.1f / %.1f\n",
                    ns.labelOn, ns.labelOff, ns.blockedOn, ns.blockedOff);
        std::printf("entries: the labels, spans and blocked waits of one step; bookkeep: entries x %.1f ns, the "
                    "larger difference; \"cost %%\" compares whole steps, whose spread here is larger\n",
                    perEntry);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-engine-bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
