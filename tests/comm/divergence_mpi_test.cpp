// The watchdog's divergence probe (comm/mpi/watchdog.h) on 2 ranks: rank 0 waits in a collective
// while rank 1 does something that cannot lead to it (closes, waits in another communicator's
// collective, sits outside any ZRT call past the bound), and rank 0's report names both ranks' calls within seconds, far inside the
// 60 s comm timeout; rank 1 hears of it from rank 0's watchdog. A rank that is only slow (in a
// ZRT call) is not reported. onPeerLost is replaced so the job survives each case: rank 0 then
// releases rank 1 over the test communicator and the collective completes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/caller_label.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Reports {
  std::mutex mu;
  std::string text;
  std::atomic<bool> in{false};
  Clock::time_point at{};
  void take(const std::string& r) {
    std::lock_guard lock(mu);
    if (in) return;
    text = r;
    at = Clock::now();
    in = true;
  }
  std::string get() {
    std::lock_guard lock(mu);
    return text;
  }
};

CommOptions options(Reports& reports, std::chrono::milliseconds bound) {
  CommOptions o;
  o.path = CommPath::Mpi;
  o.timeout = 60s;
  o.divergenceTimeout = bound;
  o.onPeerLost = [&reports](const std::string& r) { reports.take(r); };
  return o;
}

bool waitFor(const std::atomic<bool>& flag, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  while (!flag && Clock::now() < end) std::this_thread::sleep_for(10ms);
  return flag;
}

void release(int to) {
  const int token = 1;
  MPI_Send(&token, 1, MPI_INT, to, 11, test::testComm());
}

void awaitRelease() {
  int token = 0;
  MPI_Recv(&token, 1, MPI_INT, 0, 11, test::testComm(), MPI_STATUS_IGNORE);
}

// Rank 0 posts an all-reduce under its label; rank 1 runs `elsewhere` (until released) and then
// joins. Returns rank 0's report (empty on rank 1) and how long rank 0 waited for it.
std::string divergeOnce(Reports& reports, MpiCommunicator& comm, const std::function<void()>& elsewhere,
                        double* seconds = nullptr) {
  std::vector<float> buf(256, 1.f);
  comm.allReduce(buf.data(), buf.size(), DType::F32);  // both arrive here first
  if (test::worldRank() == 0) {
    const CallerLabel label("test: save_checkpoint (step 12)");
    const auto start = Clock::now();
    Work w = comm.allReduceAsync(buf.data(), buf.size(), DType::F32);
    // The probe judges peers only while this rank's caller waits: a thread waits, as a caller
    // would, while this one watches for the report.
    std::atomic<bool> waited{false};
    std::thread waiter([&] {
      try {
        w.wait(30s);
        waited = true;
      } catch (const std::exception&) {
      }
    });
    const bool reported = waitFor(reports.in, 30s);
    if (seconds) *seconds = std::chrono::duration<double>(reports.at - start).count();
    CHECK(reported);
    CHECK(!w.isCompleted());
    release(1);
    waiter.join();
    CHECK(waited.load());
    return reports.get();
  }
  elsewhere();
  comm.allReduce(buf.data(), buf.size(), DType::F32);
  return {};
}

}  // namespace

TEST_CASE("a peer closing its engine is named within seconds, and hears of it") {
  ZRT_REQUIRE_RANKS(2);
  Reports reports;
  MpiCommunicator comm(MPI_COMM_WORLD, options(reports, 6s));
  double waited = 0;
  const std::string r = divergeOnce(reports, comm, [&] {
    const CallerLabel label("test: close() at the program's exit (step 12)", CallKind::Closing);
    awaitRelease();
    // Rank 0's watchdog told this one's (it is handed on before the release is sent).
    CHECK(waitFor(reports.in, 10s));
    CHECK(reports.get().find("(reported by rank 0)") != std::string::npos);
  }, &waited);
  if (test::worldRank() != 0) return;
  MESSAGE(r);
  CHECK(waited < 5.0);
  CHECK(r.find("ranks diverged") != std::string::npos);
  CHECK(r.find("rank 0 waits in test: save_checkpoint (step 12) (allReduce #2") != std::string::npos);
  CHECK(r.find("rank 1 is closing: test: close() at the program's exit (step 12)") != std::string::npos);
}

TEST_CASE("a peer outside every ZRT call past the bound is named; a slow one in a call is not") {
  ZRT_REQUIRE_RANKS(2);
  Reports reports;
  MpiCommunicator comm(MPI_COMM_WORLD, options(reports, 2s));
  // Slow but in a call (3 s, longer than the bound): on its way, no report.
  {
    std::vector<float> buf(256, 1.f);
    if (test::worldRank() == 0) {
      const CallerLabel label("test: forward (step 3)");
      comm.allReduce(buf.data(), buf.size(), DType::F32);
    } else {
      const CallerLabel label("test: step (step 2)");
      std::this_thread::sleep_for(3s);
      comm.allReduce(buf.data(), buf.size(), DType::F32);
    }
    CHECK(!reports.in.load());
  }
  double waited = 0;
  const std::string r = divergeOnce(reports, comm, [&] {
    { const CallerLabel last("test: step (step 11)"); }
    awaitRelease();
  }, &waited);
  if (test::worldRank() != 0) return;
  MESSAGE(r);
  CHECK(waited < 6.0);
  CHECK(r.find("rank 1 has been in no ZRT call for ") != std::string::npos);
  CHECK(r.find("(the last: test: step (step 11)), more than zrt.divergence_timeout_s (2.0 s)") != std::string::npos);
}

TEST_CASE("a peer in another communicator's collective is named") {
  ZRT_REQUIRE_RANKS(2);
  {
    Reports reports;
    MpiCommunicator comm(MPI_COMM_WORLD, options(reports, 6s));
    const std::string r = divergeOnce(reports, comm, [&] {
      const CallerLabel label("test: comm.all_reduce", CallKind::WaitsElsewhere);
      awaitRelease();
    });
    if (test::worldRank() == 0) {
      MESSAGE(r);
      CHECK(r.find("rank 1 waits in test: comm.all_reduce for ") != std::string::npos);
    }
  }
}
