// Real progress: an all-reduce posted asynchronously completes while the posting thread is busy
// computing (it never calls into ZRT until it sees the operation done), and the overlap is
// measured: communication alone, computation alone, and both together.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/timing.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;
using Clock = std::chrono::steady_clock;

namespace {

// A slice of real floating-point work the compiler cannot drop.
double computeSlice(std::vector<double>& v) {
  double acc = 0;
  for (int rep = 0; rep < 4; ++rep)
    for (auto& x : v) {
      x = std::fma(x, 1.0000001, 1e-9);
      acc += x;
    }
  return acc;
}

}  // namespace

TEST_CASE("an asynchronous all-reduce completes while the caller computes") {
  ZRT_REQUIRE_RANKS(2);
  for (CommPath path : {CommPath::Mpi, CommPath::Shm}) {
    CAPTURE(nameOf(path));
    CommOptions o;
    o.path = path;
    o.timeout = std::chrono::seconds(60);
    MpiCommunicator comm(MPI_COMM_WORLD, o);
    const std::size_t n = std::size_t{1} << 20;  // 4 MiB of fp32
    std::vector<float> buf(n, 1.f);
    std::vector<double> work(16384, 1.0);
    double sink = 0;

    // Communication alone (best of 3).
    double tComm = 1e9;
    for (int i = 0; i < 3; ++i) {
      MPI_Barrier(test::testComm());
      const auto t0 = Clock::now();
      comm.allReduce(buf.data(), n, DType::F32);
      tComm = std::min(tComm, secondsSince(t0));
    }
    // Computation alone: as many slices as take about twice the communication time.
    MPI_Barrier(test::testComm());
    auto t0 = Clock::now();
    int slices = 0;
    while (secondsSince(t0) < 2 * tComm) {
      sink += computeSlice(work);
      ++slices;
    }
    const double tCompute = secondsSince(t0);

    // Both: post, then compute the same slices, polling the handle between slices only.
    MPI_Barrier(test::testComm());
    t0 = Clock::now();
    Work w = comm.allReduceAsync(buf.data(), n, DType::F32);
    double doneAt = -1;
    for (int s = 0; s < slices || (doneAt < 0 && secondsSince(t0) < 30); ++s) {
      sink += computeSlice(work);
      if (doneAt < 0 && w.isCompleted()) doneAt = secondsSince(t0);
    }
    const bool completedWhileComputing = doneAt >= 0;
    w.wait();
    const double tBoth = secondsSince(t0);
    CHECK(test::allRanks(completedWhileComputing));
    const double hidden = std::clamp((tComm + tCompute - tBoth) / tComm, 0.0, 1.0);
    if (test::worldRank() == 0) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "%s path: comm alone %.2f ms, compute alone %.2f ms, both %.2f ms "
                    "(operation done at %.2f ms); %.0f%% of the communication hidden",
                    std::string(nameOf(path)).c_str(), tComm * 1e3, tCompute * 1e3, tBoth * 1e3,
                    doneAt * 1e3, hidden * 100);
      MESSAGE(line);
    }
    CHECK(sink != 0);
  }
}
