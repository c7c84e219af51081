// zrt-offload-bench: one NVMe-offloaded optimizer step (runtime/optimizer_swapper.h: sub-groups
// read ahead, stepped by CPU Adam, written back while the next steps) against its two parts,
// each timed alone in the same run on the same files and buffers:
//   I/O alone        the same reads and writes with no arithmetic (the swapper, empty update)
//   optimizer alone  Adam over the same elements already in memory
//   pipelined        the real step
// and the ratio pipelined / max(I/O, optimizer): 1.00 is perfect overlap. Each parameter moves
// 12 bytes each way (fp32 master, m, v); the 16-bit gradients stay in memory. --disk-idle
// samples the engine's transfers in flight and prints the share of each pass with none and the
// mean: a pipeline that leaves the disk waiting on the optimizer shows in the first, a ring
// thread that cannot keep the queue full in the second.
//   zrt-offload-bench --params 1e8 --nvme-path /work/swap
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/config/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/timing.h"
#include "core/units.h"
#include "offload/aio_options.h"
#include "offload/offload_engine.h"
#include "offload/pinned_buffer_pool.h"
#include "offload/swap_space.h"
#include "runtime/optim/adam.h"
#include "runtime/optimizer_swapper.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string params = "1e8";
  std::string nvmePath = ".";
  std::string subGroup = "1e7";
  int buffers = 4;
  int repeats = 3;
  int threads = 0;  // Adam's threads; 0: what the engine uses with the swapper
  bool diskIdle = false;
  zrt::AioConfig aio;  // the config's aio section, defaults unless a flag sets them
};

// While a pass runs, samples every 200 us whether the engine has any transfer in flight: the
// share of samples with none is the time the disk had nothing to do ("disk idle").
class IdleSampler {
 public:
  explicit IdleSampler(zrt::offload::OffloadEngine& io) : io_(io), thread_([this] { run(); }) {}
  ~IdleSampler() {
    stop_ = true;
    thread_.join();
  }
  double idleShare() const {
    const auto n = samples_.load();
    return n ? static_cast<double>(idle_.load()) / static_cast<double>(n) : 0.0;
  }
  // The mean number of transfers in flight over the samples (queue_depth x rings at most).
  double meanInFlight() const {
    const auto n = samples_.load();
    return n ? static_cast<double>(inFlight_.load()) / static_cast<double>(n) : 0.0;
  }

 private:
  void run() {
    while (!stop_) {
      const std::uint64_t f = io_.stats().transfersInFlight;
      ++samples_;
      inFlight_ += f;
      if (f == 0) ++idle_;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  zrt::offload::OffloadEngine& io_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> samples_{0}, idle_{0}, inFlight_{0};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"zrt-offload-bench: the NVMe-offloaded optimizer step against its I/O and its arithmetic"};
  app.add_option("--params", o.params, "parameters in the shard (1e8, or 64M)");
  app.add_option("--nvme-path", o.nvmePath, "directory for the swap files (on the drive to measure)");
  app.add_option("--sub-group", o.subGroup, "sub_group_size, elements");
  app.add_option("--buffers", o.buffers, "buffer_count")->check(CLI::Range(1, 64));
  app.add_option("--threads", o.threads, "CPU Adam threads (0: the engine's choice, all cores but one)")->check(CLI::Range(0, 1024));
  app.add_option("--repeats", o.repeats, "timed repeats (the best is shown)")->check(CLI::Range(1, 100));
  app.add_option("--queue-depth", o.aio.queue_depth, "aio queue_depth: transfers in flight per ring")
      ->check(CLI::Range(1, 4096));
  app.add_option("--rings", o.aio.intra_op_parallelism, "aio intra_op_parallelism: rings, each with its thread")
      ->check(CLI::Range(1, 64));
  app.add_option("--block-size", o.aio.block_size, "aio block_size, bytes")->check(CLI::Range(4096, 1 << 30));
  app.add_flag("--disk-idle", o.diskIdle,
               "sample every 200 us whether the disk has work and print the share of time it had none "
               "(costs a little CPU)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const std::uint64_t n = zrt::parseBytes(o.params, "--params");
    const std::uint64_t sub = zrt::OptimizerSwapper::subGroupElements(n, zrt::parseBytes(o.subGroup, "--sub-group"));
    zrt::MemoryLedger ledger;
    auto device = zrt::makeDevice("host", ledger);
    zrt::offload::PinnedBufferPool pool(*device, static_cast<std::size_t>(o.buffers), sub * 4 * 3);
    zrt::offload::OffloadEngine io(zrt::offload::aioOptionsFrom(o.aio), pool.iovecs());
    zrt::offload::SwapSpace space({std::filesystem::path(o.nvmePath)}, ledger, 0);
    std::vector<zrt::offload::SwapFile> files;
    for (const char* name : {"master", "exp-avg", "exp-avg-sq"})
      files.push_back(space.create(name, n * 4, zrt::MemTag::OptimizerState, io.fileOptions()));
    std::vector<const zrt::offload::SwapFile*> views;
    for (const auto& f : files) views.push_back(&f);
    zrt::OptimizerSwapperOptions so;
    so.subGroupSize = sub;
    so.bufferCount = o.buffers;
    zrt::OptimizerSwapper swapper(io, pool, views, n, so);

    // The step's inputs: bf16 gradients in memory, the updated bf16 parameters written beside.
    std::vector<std::uint16_t> grads(n), copy(n);
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.f, 1e-3f);
    for (auto& g : grads) g = zrt::floatToBf16(normal(gen));
    swapper.fill([&](const zrt::OptimizerSwapper::Window& w) {
      for (std::uint64_t i = 0; i < w.count; ++i) w.states[0][i] = normal(gen);
      std::fill(w.states[1], w.states[1] + w.count, 0.f);
      std::fill(w.states[2], w.states[2] + w.count, 0.f);
    });
    zrt::optim::AdamHyper h;
    h.decoupledWeightDecay = true;
    h.weightDecay = 0.01;
    // In the pipeline Adam leaves a core to the I/O threads, as the engine does; alone it has
    // every core (its best).
    zrt::optim::StepOptions pipelined, alone;
    pipelined.threads = o.threads > 0 ? o.threads : zrt::OptimizerSwapper::optimizerThreads();
    auto adamOn = [&](float* master, float* m, float* v, std::uint64_t begin, std::uint64_t count,
                      const zrt::optim::StepOptions& options) {
      zrt::optim::AdamState s{master, m, v, grads.data() + begin, zrt::DType::BF16,
                              copy.data() + begin, zrt::DType::BF16, count};
      zrt::optim::adamStep(h, s, options);
    };
    // The optimizer alone: the same elements, all in memory (12 bytes a parameter of RAM).
    std::vector<float> master(n), m(n, 0.f), v(n, 0.f);
    for (auto& x : master) x = normal(gen);

    double ioBest = 1e30, optimBest = 1e30, stepBest = 1e30;
    // The disk's idle share and mean transfers in flight in the best pass of each.
    double ioIdle = 0, stepIdle = 0, ioDepth = 0, stepDepth = 0;
    zrt::OptimizerSwapper::Stats stepStats;
    for (int r = 0; r < o.repeats; ++r) {
      std::optional<IdleSampler> sampler;
      if (o.diskIdle) sampler.emplace(io);
      auto t0 = Clock::now();
      swapper.forEach([](const zrt::OptimizerSwapper::Window&) {});
      const double ioSeconds = zrt::secondsSince(t0);
      if (ioSeconds < ioBest) {
        ioBest = ioSeconds;
        ioIdle = sampler ? sampler->idleShare() : 0;
        ioDepth = sampler ? sampler->meanInFlight() : 0;
      }
      sampler.reset();
      swapper.takeStats();
      t0 = Clock::now();
      for (std::uint64_t b = 0; b < n; b += sub)
        adamOn(master.data() + b, m.data() + b, v.data() + b, b, std::min(sub, n - b), alone);
      optimBest = std::min(optimBest, zrt::secondsSince(t0));
      ++h.step;
      if (o.diskIdle) sampler.emplace(io);
      t0 = Clock::now();
      swapper.forEach([&](const zrt::OptimizerSwapper::Window& w) {
        adamOn(w.states[0], w.states[1], w.states[2], w.begin, w.count, pipelined);
      });
      const double step = zrt::secondsSince(t0);
      if (step < stepBest) {
        stepBest = step;
        stepStats = swapper.takeStats();
        stepIdle = sampler ? sampler->idleShare() : 0;
        stepDepth = sampler ? sampler->meanInFlight() : 0;
      }
      sampler.reset();
      ++h.step;
    }
    const double bytes = 2.0 * 12.0 * static_cast<double>(n);  // 12 bytes a parameter, each way
    std::printf("zrt-offload-bench: %s parameters, sub-groups of %llu, %d buffers, %s, %s\n",
                o.params.c_str(), static_cast<unsigned long long>(sub), o.buffers,
                io.describe().c_str(), o.nvmePath.c_str());
    std::printf("moved per step: %s (12 bytes a parameter each way); best of %d; Adam on %d thread(s) in the "
                "pipeline, all cores alone\n",
                zrt::formatBytes(static_cast<std::uint64_t>(bytes)).c_str(), o.repeats, pipelined.threads);
    std::printf("%-18s %9s %10s\n", "", "seconds", "GB/s I/O");
    std::printf("%-18s %9.5f %10.2f\n", "I/O alone", ioBest, bytes / ioBest / 1e9);
    std::printf("%-18s %9.5f %10s\n", "optimizer alone", optimBest, "-");
    std::printf("%-18s %9.5f %10.2f   (waited on I/O %.3f s, in Adam %.3f s)\n", "pipelined step",
                stepBest, bytes / stepBest / 1e9, stepStats.ioWaitSeconds, stepStats.updateSeconds);
    if (o.diskIdle)
      std::printf("disk idle (no transfer in flight): %.1f%% of I/O alone, %.1f%% of the pipelined step; "
                  "mean transfers in flight %.2f and %.2f\n",
                  100 * ioIdle, 100 * stepIdle, ioDepth, stepDepth);
    std::printf("pipelined / max(I/O, optimizer) = %.3f   (target <= 1.05)\n",
                stepBest / std::max(ioBest, optimBest));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-offload-bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
