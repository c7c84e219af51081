#include "tools/comm-bench/overlap.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/gradient_bucketer.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_check.h"
#include "comm/reduce_kernels.h"
#include "runtime/units.h"

namespace zrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One layer's backward: the host idles (sleep: the work is on an accelerator) or burns the CPU.
void compute(double seconds, bool spin) {
  if (!spin) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return;
  }
  const auto t0 = Clock::now();
  volatile double x = 1.0;
  while (since(t0) < seconds)
    for (int i = 0; i < 256; ++i) x = x * 1.0000001 + 1e-9;
}

struct Pass {
  double backward = 0, comm = 0, exposed = 0;
};

// One simulated backward: layers from last to first, each computing, then announcing its
// gradient. Returns the slowest rank's backward and communication times and its exposed part.
Pass backward(comm::MpiCommunicator& c, comm::GradientBucketer& b,
              const std::vector<std::vector<float>>& grads, double perLayer, bool spin,
              MPI_Comm sync) {
  c.stats().reset();
  ZRT_CHECK_MPI(MPI_Barrier(sync));
  const auto t0 = Clock::now();
  b.beginBackward();
  for (std::size_t l = grads.size(); l-- > 0;) {
    compute(perLayer, spin);
    b.gradientReady(l, grads[l].data());
  }
  b.finishBackward();
  Pass p;
  p.backward = maxOverRanks(since(t0), sync);
  p.comm = maxOverRanks(c.stats().get(comm::OpKind::ReduceScatter).seconds, sync);
  p.exposed = maxOverRanks(b.exposedSeconds(), sync);
  return p;
}

}  // namespace

void runOverlap(const BenchOptions& o) {
  MPI_Comm sync = MPI_COMM_NULL;
  ZRT_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &sync));
  const std::size_t numel = std::max<std::size_t>(1, o.layerBytes / sizeof(float));
  const std::vector<std::size_t> numels(static_cast<std::size_t>(o.layers), numel);
  std::vector<std::vector<float>> grads(numels.size(), std::vector<float>(numel));
  for (std::size_t l = 0; l < grads.size(); ++l)
    for (std::size_t i = 0; i < numel; ++i) grads[l][i] = static_cast<float>((i + l + static_cast<std::size_t>(o.rank)) % 13);
  std::vector<std::string> modes;
  if (o.compute == "sleep" || o.compute == "both") modes.push_back("sleep");
  if (o.compute == "spin" || o.compute == "both") modes.push_back("spin");

  if (o.rank == 0 && !o.json)
    std::printf("# overlap: stage-2 bucketed reduce-scatter (fp32), %d layers x %s, one layer per "
                "bucket; each layer computes as long as one bucket's reduce-scatter takes alone; "
                "means of 4 passes after a warm-up (slowest rank of each)\n"
                "%-5s %-6s %-12s %11s %9s %11s %12s %7s\n",
                o.layers, formatBytes(o.layerBytes).c_str(), "path", "compute", "overlap_comm",
                "backward_ms", "comm_ms", "exposed_ms", "exposed/comm", "hidden");
  for (const std::string& path : o.paths) {
    comm::CommOptions co = comm::CommOptions::fromEnvironment();
    co.path = comm::parseCommPath(path);
    comm::MpiCommunicator c(MPI_COMM_WORLD, co);
    comm::GradientBucketerOptions bo;
    bo.stage = 2;
    bo.reduceBucketSize = numel;
    bo.dtype = DType::F32;
    // Calibration: the buckets alone, synchronously, no compute.
    bo.overlapComm = false;
    double perBucket = 0;
    {
      comm::GradientBucketer b(c, numels, bo);
      backward(c, b, grads, 0, false, sync);  // warm-up
      Pass p = backward(c, b, grads, 0, false, sync);
      perBucket = p.comm / o.layers;
    }
    for (const std::string& mode : modes) {
      for (bool overlapComm : {false, true}) {
        bo.overlapComm = overlapComm;
        comm::GradientBucketer b(c, numels, bo);
        backward(c, b, grads, perBucket, mode == "spin", sync);  // warm-up
        // Means over several passes (no pass picked out).
        Pass mean;
        constexpr int kPasses = 4;
        for (int rep = 0; rep < kPasses; ++rep) {
          const Pass p = backward(c, b, grads, perBucket, mode == "spin", sync);
          mean.backward += p.backward / kPasses;
          mean.comm += p.comm / kPasses;
          mean.exposed += p.exposed / kPasses;
        }
        if (o.rank != 0) continue;
        const double fraction = mean.comm > 0 ? mean.exposed / mean.comm : 0;
        if (o.json) {
          nlohmann::json j = {{"op", "overlap_reduce_scatter"},
                              {"path", path},
                              {"compute", mode},
                              {"overlap_comm", overlapComm},
                              {"ranks", o.size},
                              {"layers", o.layers},
                              {"bucket_bytes", numel * sizeof(float)},
                              {"compute_per_layer_ms", perBucket * 1e3},
                              {"backward_ms", mean.backward * 1e3},
                              {"comm_ms", mean.comm * 1e3},
                              {"exposed_ms", mean.exposed * 1e3},
                              {"exposed_fraction", fraction},
                              {"hidden_fraction", 1 - fraction}};
          std::printf("%s\n", j.dump().c_str());
        } else {
          std::printf("%-5s %-6s %-12s %11.2f %9.2f %11.2f %12.3f %6.1f%%   (compute %.2f ms/layer)\n",
                      path.c_str(), mode.c_str(), overlapComm ? "true" : "false",
                      mean.backward * 1e3, mean.comm * 1e3, mean.exposed * 1e3, fraction,
                      100 * (1 - fraction), perBucket * 1e3);
        }
        std::fflush(stdout);
      }
    }
  }
  MPI_Comm_free(&sync);
}

}  // namespace zrt::bench
