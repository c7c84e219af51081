// MpiEnvironment: the RAII owner of MPI's initialisation for a process. Initialises MPI with
// MPI_THREAD_MULTIPLE (the communication thread and the caller both call MPI), switches
// MPI_COMM_WORLD to MPI_ERRORS_RETURN so ZRT_CHECK_MPI sees error codes, and records the rank
// for error messages. Finalises on destruction only if it initialised; when this rank left its
// peers on an exception (comm/mpi/left_peers.h), the finalize is given ZRT_UNWIND_GRACE_S to
// complete before the rank ends itself with a message; after a peer loss (comm/mpi/peer_loss.h)
// it is skipped.
// Thread-safety: construct and destroy on the thread that calls MPI_Init/MPI_Finalize (MPI
// requires the main thread) after every communicator is gone; the getters are plain reads.
#pragma once

#include <mpi.h>

#include <chrono>

namespace zrt::comm {

class MpiEnvironment {
 public:
  MpiEnvironment(int* argc, char*** argv, int requiredThreadLevel = MPI_THREAD_MULTIPLE);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int threadLevel() const { return provided_; }

 private:
  bool owns_ = false;
  int rank_ = 0;
  int size_ = 1;
  int provided_ = MPI_THREAD_SINGLE;
  std::chrono::milliseconds grace_{0};
};

}  // namespace zrt::comm
