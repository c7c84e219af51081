// Real progress: an all-reduce posted asynchronously progresses while the posting thread
// computes (it never calls into ZRT except to poll the handle between slices of compute), so
// most of it is hidden behind that compute. Measured on every rank: the communication alone
// (best of 3), then posted before compute four times as long; the time then spent in wait() is
// the exposed part, and hidden = 1 - exposed / alone.
//
// The compute sleeps, as the host does while a GPU computes. Busy compute would measure the CPU
// budget instead of progress: up to 4 ranks, each with a progress thread, share 2 cores here, so
// a spinning caller takes the core the progress thread needs (docs/results.md's overlap runs
// show the shortfall). With the host idle, the operation runs on the free cores.
//
// The threshold: at least half of the communication hidden, on the worst rank. An operation that
// progressed only while the caller waits would start after the compute and hide nothing (about
// 0), so half still tells progress from none, with room for noise on the shared 2-core build
// machine. The compute lasts 4 times the communication's best time (at least 20 ms), so an
// operation slowed by load still fits inside it, and the best of 3 attempts counts (noise only
// adds exposure). Measured there at load average 9 to 10 (other engineers' builds): 10 runs at
// 2 and 4 ranks hid 100% on every rank and path, the operation seen done after 2 to 170 ms of
// compute lasting 20 to 1500 ms (the mpi path's time alone varied from 1 to 350 ms).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kMinHidden = 0.5;
// Compute for 4 times the communication's best time, at least 20 slices of 1 ms.
constexpr double kComputeOverComm = 4;
constexpr int kMinSlices = 20;
constexpr double kSlice = 1e-3;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("an asynchronous all-reduce is mostly hidden behind compute that leaves the CPU free") {
  ZRT_REQUIRE_RANKS(2);
  for (CommPath path : {CommPath::Mpi, CommPath::Shm}) {
    CAPTURE(nameOf(path));
    CommOptions o;
    o.path = path;
    o.timeout = std::chrono::seconds(60);
    MpiCommunicator comm(MPI_COMM_WORLD, o);
    const std::size_t n = std::size_t{1} << 20;  // 4 MiB of fp32
    std::vector<float> buf(n, 1.f);

    // Communication alone (best of 3).
    double tComm = 1e9;
    for (int i = 0; i < 3; ++i) {
      MPI_Barrier(test::testComm());
      const auto t0 = Clock::now();
      comm.allReduce(buf.data(), n, DType::F32);
      tComm = std::min(tComm, since(t0));
    }
    const int slices = std::max(kMinSlices, static_cast<int>(kComputeOverComm * tComm / kSlice));

    // Post, compute (polling the handle between slices only), then wait: the time in wait() is
    // the exposed communication. Best of 3 attempts (every rank makes all 3: each is
    // collective), since noise only ever adds exposure.
    double hidden = 0, tCompute = 0, tExposed = 0, doneAt = -1;
    for (int attempt = 0; attempt < 3; ++attempt) {
      MPI_Barrier(test::testComm());
      const auto t0 = Clock::now();
      Work w = comm.allReduceAsync(buf.data(), n, DType::F32);
      double seenDone = -1;
      for (int s = 0; s < slices; ++s) {
        std::this_thread::sleep_for(std::chrono::duration<double>(kSlice));
        if (seenDone < 0 && w.isCompleted()) seenDone = since(t0);
      }
      const double computed = since(t0);
      w.wait(std::chrono::seconds(60));
      const double exposed = since(t0) - computed;
      const double h = std::clamp(1 - exposed / tComm, 0.0, 1.0);
      if (attempt == 0 || h > hidden) {
        hidden = h;
        tCompute = computed;
        tExposed = exposed;
        doneAt = seenDone;
      }
    }

    double worstHidden = hidden;
    MPI_Allreduce(&hidden, &worstHidden, 1, MPI_DOUBLE, MPI_MIN, test::testComm());
    if (test::worldRank() == 0) {
      char seen[64] = "only in the wait";
      if (doneAt >= 0) std::snprintf(seen, sizeof seen, "at %.2f ms", doneAt * 1e3);
      char line[320];
      std::snprintf(line, sizeof line,
                    "%s path, rank 0: comm alone %.2f ms; posted, then computed %.2f ms (%d "
                    "slices; operation seen done %s), then waited %.2f ms: %.0f%% of the "
                    "communication hidden (worst rank %.0f%%)",
                    std::string(nameOf(path)).c_str(), tComm * 1e3, tCompute * 1e3, slices, seen,
                    tExposed * 1e3, hidden * 100, worstHidden * 100);
      MESSAGE(line);
    }
    // Every rank checks the same (reduced) value, so they agree on the outcome.
    CHECK_MESSAGE(worstHidden >= kMinHidden,
                  "only " << worstHidden * 100 << "% of the all-reduce was hidden on the worst "
                          << "rank (at least " << kMinHidden * 100 << "% expected)");
  }
}
