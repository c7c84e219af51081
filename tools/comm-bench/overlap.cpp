#include "tools/comm-bench/overlap.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/gradient_bucketer.h"
#include "comm/mpi/mpi_handles.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/null/null_communicator.h"
#include "comm/mpi_check.h"
#include "core/element_arithmetic.h"
#include "core/timing.h"
#include "core/units.h"
#include "tools/common/statistics.h"
#include "tools/comm-bench/single_copy.h"

namespace zrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A fixed amount of floating-point work (so a slowed-down CPU shows as a longer backward).
double spinWork(long iters) {
  volatile double x = 1.0;
  for (long i = 0; i < iters; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

// How one layer computes: sleeping (the host idle, as while a GPU computes) for `seconds`, or
// `iters` of spinWork, calibrated to take `seconds` on an idle machine.
struct Compute {
  bool spin = false;
  double seconds = 0;
  long iters = 0;
  void run() const {
    if (spin) spinWork(iters);
    else if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
};

long calibrateSpin(double seconds) {
  long iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    spinWork(iters);
    const double t = secondsSince(t0);
    if (t > 0.02 || iters > (1L << 40)) return std::max(1L, static_cast<long>(iters * seconds / t));
    iters *= 4;
  }
}

struct Pass {
  double backward = 0, baseline = 0, comm = 0, exposed = 0, waited = 0;
};

// One simulated backward: layers from last to first, each computing, then announcing its
// gradient. Returns the wall time, the operations' time and the time blocked in the bucketer;
// the slowest rank's of each.
Pass backward(comm::Communicator& c, comm::GradientBucketer& b,
              const std::vector<std::vector<float>>& grads, const Compute& work, MPI_Comm sync) {
  c.stats().reset();
  ZRT_CHECK_MPI(MPI_Barrier(sync));
  const auto t0 = Clock::now();
  b.beginBackward();
  for (std::size_t l = grads.size(); l-- > 0;) {
    work.run();
    b.gradientReady(l, grads[l].data());
  }
  b.finishBackward();
  const double wall = secondsSince(t0);
  Pass p;
  p.backward = maxOverRanks(wall, sync);
  p.comm = maxOverRanks(c.stats().get(comm::OpKind::ReduceScatter).seconds, sync);
  p.waited = maxOverRanks(b.exposedSeconds(), sync);
  return p;
}

}  // namespace

void runOverlap(const BenchOptions& o) {
  const comm::MpiCommHandle syncComm = comm::MpiCommHandle::dup(MPI_COMM_WORLD);
  const MPI_Comm sync = syncComm.get();
  const std::size_t numel = std::max<std::size_t>(1, o.layerBytes / sizeof(float));
  const std::vector<std::size_t> numels(static_cast<std::size_t>(o.layers), numel);
  std::vector<std::vector<float>> grads(numels.size(), std::vector<float>(numel));
  for (std::size_t l = 0; l < grads.size(); ++l)
    for (std::size_t i = 0; i < numel; ++i)
      grads[l][i] = static_cast<float>((i + l + static_cast<std::size_t>(o.rank)) % 13);
  std::vector<std::string> modes;
  if (o.compute == "sleep" || o.compute == "both") modes.push_back("sleep");
  if (o.compute == "spin" || o.compute == "both") modes.push_back("spin");
  const int rounds = o.rounds;

  const std::string singleCopy = singleCopyMechanism();
  if (o.rank == 0 && !o.json)
    std::printf(
        "# single-copy: %s\n"
        "# overlap: stage-2 bucketed reduce-scatter (fp32), %d layers x %s, one layer per bucket;"
        " each layer computes as long as one bucket's reduce-scatter takes alone.\n"
        "# %d rounds, each running the backward without communication, with overlap_comm off and"
        " on, and the buckets' communication alone; medians over rounds (slowest rank each time).\n"
        "# comm_ms: the buckets' reduce-scatters alone (no compute, synchronous); exposed_ms: the"
        " backward's time minus the same backward without communication (no_comm_ms: layers and"
        " bucket copies); hidden = 1 - exposed/comm; waited_ms: time blocked in the bucketer\n"
        "# hidden_p25-p75: the spread of 1 - exposed/comm over rounds (each round's own"
        " measurements): how far one run's figure can be trusted on this machine\n"
        "%-5s %-6s %-12s %11s %10s %9s %11s %12s %8s %15s %9s\n",
        singleCopy.c_str(), o.layers, formatBytes(o.layerBytes).c_str(), rounds, "path",
        "compute", "overlap_comm", "backward_ms", "no_comm_ms", "comm_ms", "exposed_ms",
        "exposed/comm", "hidden", "hidden_p25-p75", "waited_ms");
  for (const std::string& path : o.paths) {
    comm::CommOptions co = comm::CommOptions::fromEnvironment();
    co.path = comm::parseCommPath(path);
    comm::MpiCommunicator c(MPI_COMM_WORLD, co);
    // The same backward through a communicator that moves nothing costs what the backward
    // costs without communication (layers, bucket copies, bookkeeping).
    comm::NullCommunicator none(o.rank, o.size);
    comm::GradientBucketerOptions bo;
    bo.stage = 2;
    bo.reduceBucketSize = numel;
    bo.dtype = DType::F32;
    bo.overlapComm = false;
    comm::GradientBucketer syncB(c, numels, bo), noneB(none, numels, bo);
    bo.overlapComm = true;
    comm::GradientBucketer overlapB(c, numels, bo);

    // One bucket's reduce-scatter alone: the median of a few synchronous backwards without
    // compute (after a warm-up).
    backward(c, syncB, grads, Compute{}, sync);
    std::vector<double> calib;
    for (int rep = 0; rep < 5; ++rep) calib.push_back(backward(c, syncB, grads, Compute{}, sync).comm);
    const double perBucket = median(calib) / o.layers;
    // The same spin work on every rank: rank 0's calibration.
    double itersD = static_cast<double>(calibrateSpin(perBucket));
    ZRT_CHECK_MPI(MPI_Bcast(&itersD, 1, MPI_DOUBLE, 0, sync));

    for (const std::string& mode : modes) {
      const Compute work{mode == "spin", perBucket, static_cast<long>(itersD)};
      std::vector<double> commAlone, base, wall[2], exposed[2], waited[2], hiddenInRound[2];
      backward(none, noneB, grads, work, sync);  // warm-ups
      backward(c, overlapB, grads, work, sync);
      for (int round = 0; round < rounds; ++round) {
        commAlone.push_back(backward(c, syncB, grads, Compute{}, sync).comm);
        const double b = backward(none, noneB, grads, work, sync).backward;
        base.push_back(b);
        for (int ov = 0; ov < 2; ++ov) {
          const Pass p = backward(c, ov ? overlapB : syncB, grads, work, sync);
          wall[ov].push_back(p.backward);
          exposed[ov].push_back(std::max(0.0, p.backward - b));
          waited[ov].push_back(p.waited);
          if (commAlone.back() > 0)
            hiddenInRound[ov].push_back(1 - exposed[ov].back() / commAlone.back());
        }
      }
      if (o.rank != 0) continue;
      const double commMs = median(commAlone) * 1e3;
      for (int ov = 0; ov < 2; ++ov) {
        const double exposedMs = median(exposed[ov]) * 1e3;
        const double fraction = commMs > 0 ? exposedMs / commMs : 0;
        const double p25 = quantile(hiddenInRound[ov], 0.25), p75 = quantile(hiddenInRound[ov], 0.75);
        if (o.json) {
          nlohmann::json j = {{"op", "overlap_reduce_scatter"},
                              {"path", path},
                              {"compute", mode},
                              {"overlap_comm", ov == 1},
                              {"ranks", o.size},
                              {"layers", o.layers},
                              {"bucket_bytes", numel * sizeof(float)},
                              {"compute_per_layer_ms", perBucket * 1e3},
                              {"backward_ms", median(wall[ov]) * 1e3},
                              {"no_comm_backward_ms", median(base) * 1e3},
                              {"comm_ms", commMs},
                              {"exposed_ms", exposedMs},
                              {"waited_ms", median(waited[ov]) * 1e3},
                              {"exposed_fraction", fraction},
                              {"hidden_fraction", 1 - fraction},
                              {"hidden_p25", p25},
                              {"hidden_p75", p75},
                              {"rounds", rounds}};
          std::printf("%s\n", j.dump().c_str());
        } else {
          char spread[32];
          std::snprintf(spread, sizeof spread, "%.0f-%.0f%%", 100 * p25, 100 * p75);
          std::printf("%-5s %-6s %-12s %11.2f %10.2f %9.2f %11.2f %12.3f %7.1f%% %15s %9.2f\n",
                      path.c_str(), mode.c_str(), ov ? "true" : "false", median(wall[ov]) * 1e3,
                      median(base) * 1e3, commMs, exposedMs, fraction, 100 * (1 - fraction),
                      spread, median(waited[ov]) * 1e3);
        }
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace zrt::bench
