// The consistency check (CommOptions::checkConsistency): ranks that post the same collective
// with different sizes, dtypes or per-rank counts all get a PeerError naming what each rank
// posted, and the communicator still works afterwards. A mismatch needs two ranks, so this
// program is registered for 2 ranks and more only.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;

TEST_CASE("mismatched sizes and dtypes are caught on every rank, naming the ranks") {
  ZRT_REQUIRE_RANKS(2);
  const int me = test::worldRank();
  CommOptions o;
  o.path = CommPath::Mpi;
  o.timeout = std::chrono::seconds(60);
  o.checkConsistency = true;
  MpiCommunicator comm(MPI_COMM_WORLD, o);
  Buf buf(DType::F32, 16);
  std::string message;
  try {
    comm.allReduce(buf.data(), me == 1 ? 12 : 10, DType::F32);
  } catch (const PeerError& e) {
    message = e.what();
  }
  CHECK(message.find("rank 1 posted allReduce") != std::string::npos);
  CHECK(message.find("rank 0 posted allReduce") != std::string::npos);
  // Led by this rank's own operation, as its handle names it.
  CHECK(message.find(detail::cat("allReduce #1 (", me == 1 ? 48 : 40, " B fp32, path mpi): ")) == 0);

  message.clear();
  try {
    comm.allReduce(buf.data(), 8, me == 1 ? DType::F16 : DType::F32);
  } catch (const PeerError& e) {
    message = e.what();
  }
  CHECK(message.find("fp16") != std::string::npos);

  // Same total, different split between ranks.
  message.clear();
  std::vector<std::size_t> counts(static_cast<std::size_t>(test::worldSize()), 2);
  if (me == 1) {
    counts[0] = 3;
    counts[1] = 1;
  }
  try {
    Buf out(DType::F32, 4);
    comm.reduceScatter(buf.data(), out.data(), counts, DType::F32);
  } catch (const PeerError& e) {
    message = e.what();
  }
  CHECK(message.find("different per-rank counts") != std::string::npos);
  // The communicator still works afterwards.
  comm.allReduce(buf.data(), 16, DType::F32);
}
