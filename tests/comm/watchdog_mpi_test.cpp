// The watchdog's report when a rank skips a collective: which operation, how many bytes, and
// which ranks had not arrived. onTimeout is replaced so the job survives: once the report is in,
// the skipping rank is told (over the test communicator) to post its collective after all, and
// the stuck operation completes. The real MPI_Abort path is tested by comm_timeout_abort.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;

TEST_CASE("a rank that skips a collective is named in the timeout report") {
  ZRT_REQUIRE_RANKS(2);
  const int me = test::worldRank(), last = test::worldSize() - 1;
  std::mutex mu;
  std::string report;
  std::atomic<bool> reported{false};
  CommOptions o;
  o.path = CommPath::Mpi;
  // Only rank 0 times out quickly: the others would report too, racing with the recovery.
  o.timeout = me == 0 ? std::chrono::milliseconds(500) : std::chrono::milliseconds(60000);
  o.onTimeout = [&](const std::string& r) {
    // On a loaded machine the first all-reduce can itself outlive rank 0's 0.5 s: only the
    // report on the skipped one counts (an earlier report would release the last rank early).
    if (r.find("allReduce #2 ") == std::string::npos) return;
    std::lock_guard lock(mu);
    report = r;
    reported = true;
  };
  MpiCommunicator comm(MPI_COMM_WORLD, o);
  std::vector<float> buf(1024, 1.f);
  comm.allReduce(buf.data(), buf.size(), DType::F32);  // #1: everybody

  if (me != last) {
    Work w = comm.allReduceAsync(buf.data(), buf.size(), DType::F32);  // #2: the last rank skips
    if (me == 0) {
      // Waits for the watchdog's report (it fires after 0.5 s), bounded by 30 s.
      for (int i = 0; i < 3000 && !reported; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      CHECK(reported.load());
      CHECK(!w.isCompleted());
      MPI_Send(&me, 1, MPI_INT, last, 7, test::testComm());  // release the last rank
    }
    w.wait(std::chrono::seconds(30));
    if (me != 0) return;
    std::lock_guard lock(mu);
    CHECK(report.find("allReduce #2 (4.00 KiB fp32, path mpi) (4096 bytes) has not completed") !=
          std::string::npos);
    CHECK(report.find(detail::cat("ranks that had not arrived: ", last)) != std::string::npos);
    CHECK(report.find(detail::cat("rank ", last, ": not arrived: has posted 1 collective(s), "
                                  "finished 1, and is not in a collective")) != std::string::npos);
    MESSAGE(report);
  } else {
    int token = 0;
    MPI_Recv(&token, 1, MPI_INT, 0, 7, test::testComm(), MPI_STATUS_IGNORE);
    comm.allReduce(buf.data(), buf.size(), DType::F32);  // #2, late
    CHECK(!reported.load());  // this rank had nothing in flight
  }
}
