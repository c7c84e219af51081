// Real progress: an all-reduce posted asynchronously progresses while the posting thread
// computes (it never calls into ZRT except to poll the handle between slices of compute), so
// most of it is hidden behind that compute. Measured on every rank: the communication alone
// (best of 3), then posted before compute of a fixed length; the time then spent in wait() is
// the exposed part, and hidden = 1 - exposed / alone.
//
// The compute sleeps, as the host does while a GPU computes. Busy compute would measure the CPU
// budget instead of progress: up to 4 ranks, each with a progress thread, share 2 cores here, so
// a spinning caller takes the core the progress thread needs (docs/results.md's overlap runs
// show the shortfall). With the host idle, the operation runs on the free cores.
//
// The threshold: at least half of the communication hidden, on the worst rank. An operation that
// progressed only while the caller waits would start after the compute and hide nothing (about
// 0), so half still tells progress from none. The rest is room for the shared 2-core build
// machine, where other engineers' builds keep the load average at 7 to 12: there the 4 MiB
// all-reduce takes 1 to 45 ms alone, but has spells of 100 to 680 ms (alone or posted), so a
// compute of 4x the best time failed 6 of 28 runs (one slow spell exposes 100x the best time).
// Hence the compute lasts at least 0.5 s, and an attempt is repeated (up to 5, the best counts:
// noise only adds exposure) while a rank is below the threshold. So measured, 16 runs at 2 and
// 4 ranks hid 100% on every rank and path in the first attempt.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/timing.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kMinHidden = 0.5;
// The compute lasts 4 times the communication's best time, and at least 0.5 s: under load the
// operation has slow spells of up to a few hundred ms (seen alone too), which must fit inside.
constexpr double kComputeOverComm = 4;
constexpr double kMinCompute = 0.5;
// Sleep slices between polls of the handle; the compute ends at its deadline, however long the
// sleeps overshoot on a loaded machine.
constexpr auto kSlice = std::chrono::milliseconds(2);
constexpr int kMaxAttempts = 5;


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
      tComm = std::min(tComm, secondsSince(t0));
    }
    const double computeFor = std::max(kMinCompute, kComputeOverComm * tComm);

    // Post, compute (polling the handle between slices only), then wait: the time in wait() is
    // the exposed communication. The best attempt counts, since noise only ever adds exposure;
    // attempts stop once every rank reached the threshold (each rank makes the same attempts,
    // as each is collective), after kMaxAttempts at most.
    double hidden = 0, tCompute = 0, tExposed = 0, doneAt = -1;
    int attempts = 0;
    while (attempts < kMaxAttempts) {
      ++attempts;
      MPI_Barrier(test::testComm());
      const auto t0 = Clock::now();
      Work w = comm.allReduceAsync(buf.data(), n, DType::F32);
      double seenDone = -1;
      while (secondsSince(t0) < computeFor) {
        std::this_thread::sleep_for(kSlice);
        if (seenDone < 0 && w.isCompleted()) seenDone = secondsSince(t0);
      }
      const double computed = secondsSince(t0);
      w.wait(std::chrono::seconds(60));
      const double exposed = secondsSince(t0) - computed;
      const double h = std::clamp(1 - exposed / tComm, 0.0, 1.0);
      if (attempts == 1 || h > hidden) {
        hidden = h;
        tCompute = computed;
        tExposed = exposed;
        doneAt = seenDone;
      }
      if (test::allRanks(hidden >= kMinHidden)) break;
    }

    double worstHidden = hidden;
    MPI_Allreduce(&hidden, &worstHidden, 1, MPI_DOUBLE, MPI_MIN, test::testComm());
    if (test::worldRank() == 0) {
      char seen[64] = "only in the wait";
      if (doneAt >= 0) std::snprintf(seen, sizeof seen, "at %.2f ms", doneAt * 1e3);
      char line[320];
      std::snprintf(line, sizeof line,
                    "%s path, rank 0: comm alone %.2f ms; posted, then computed %.2f ms "
                    "(operation seen done %s), then waited %.2f ms: %.0f%% of the "
                    "communication hidden (worst rank %.0f%%; best of %d attempts)",
                    std::string(nameOf(path)).c_str(), tComm * 1e3, tCompute * 1e3, seen,
                    tExposed * 1e3, hidden * 100, worstHidden * 100, attempts);
      MESSAGE(line);
    }
    // Every rank checks the same (reduced) value, so they agree on the outcome.
    CHECK_MESSAGE(worstHidden >= kMinHidden,
                  "only " << worstHidden * 100 << "% of the all-reduce was hidden on the worst "
                          << "rank (at least " << kMinHidden * 100 << "% expected)");
  }
}
