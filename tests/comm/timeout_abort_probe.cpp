// A job in which the last rank skips the second collective. The other ranks' watchdogs must
// report the operation, its bytes and the missing rank, then end the job with MPI_Abort, well
// before ctest's timeout. ctest passes the test when the report appears in the output.
//   timeout_abort_probe <timeout seconds>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_env.h"

int main(int argc, char** argv) {
  zrt::comm::MpiEnvironment env(&argc, &argv);
  zrt::comm::CommOptions o;
  o.path = zrt::comm::CommPath::Mpi;
  o.timeout = std::chrono::milliseconds(static_cast<long>(1000 * std::atof(argc > 1 ? argv[1] : "2")));
  zrt::comm::MpiCommunicator comm(MPI_COMM_WORLD, o);
  std::vector<float> buf(4096, 1.f);
  comm.allReduce(buf.data(), buf.size(), zrt::DType::F32);
  if (env.rank() != env.size() - 1) {
    comm.allReduce(buf.data(), buf.size(), zrt::DType::F32);  // never completes
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the abort ends this first
  }
  return 0;  // not reached: the watchdog aborts the job
}
