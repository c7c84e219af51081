#include "comm/mpi_env.h"

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/mpi/left_peers.h"
#include "comm/mpi/mpi_leak_check.h"
#include "comm/mpi/peer_loss.h"
#include "comm/mpi_check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/termination.h"

namespace zrt::comm {
namespace {

// Ends the process when MPI_Finalize has not returned within `grace`: this rank left its peers on
// an exception and they are still in the collectives it left, so they never join the finalize.
// Its own error is printed by then; the launcher sees it exit and ends the job, and the peers
// report which rank was lost while they waited in what.
class FinalizeGuard {
 public:
  explicit FinalizeGuard(std::chrono::milliseconds grace)
      : thread_([this, grace] {
          std::unique_lock lock(mu_);
          if (cv_.wait_for(lock, grace, [&] { return done_; })) return;
          logError(detail::cat("MPI_Finalize waited ", grace.count() / 1000.0,
                               " s (ZRT_UNWIND_GRACE_S) for peers this rank left on an exception "
                               "(its error is above); they are still in the step it left: ending "
                               "this rank, so the launcher ends the job"));
          runTerminationHooks(0);
          std::_Exit(1);
        }) {}
  ~FinalizeGuard() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace

MpiEnvironment::MpiEnvironment(int* argc, char*** argv, int requiredThreadLevel) {
  int initialized = 0;
  ZRT_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    // MPI_Init_thread returns only on success under the default handler; a failure aborts.
    UntrackedAllocations mpiOwn;  // what Open MPI keeps until (or drops at) MPI_Finalize
    ZRT_CHECK_MPI(MPI_Init_thread(argc, argv, requiredThreadLevel, &provided_));
    owns_ = true;
  } else {
    ZRT_CHECK_MPI(MPI_Query_thread(&provided_));
  }
  grace_ = unwindGrace();  // a malformed ZRT_UNWIND_GRACE_S is reported now, not at the end
  ZRT_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  ZRT_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  ZRT_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  setProcessRank(rank_);
  if (provided_ < requiredThreadLevel) {
    ZRT_THROW(ExternalError, "MPI provides thread level ", provided_, " but ZRT needs ",
              requiredThreadLevel, " (MPI_THREAD_MULTIPLE = ", MPI_THREAD_MULTIPLE,
              "); use an MPI built with thread support");
  }
}

MpiEnvironment::~MpiEnvironment() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && peerLost()) {
    // MPI_Finalize would wait for the lost peer (and for the operation still blocked on the
    // abandoned progress thread): the process ends without it, and the launcher ends the job.
    // The engines that owned swap files were left alive (not torn down): their files go now.
    logError(detail::cat("skipping MPI_Finalize: the peers were left behind (", peerLossReport(), ")"));
    runTerminationHooks(0);
    return;
  }
  if (!finalized) {
    // Under AddressSanitizer: the program's leaks, before Open MPI's deliberate ones at finalize
    // would be counted (comm/mpi/mpi_leak_check.h). A leak is reported now and again at exit,
    // which then fails the process.
    checkLeaksBeforeMpiFinalize();
    std::optional<FinalizeGuard> guard;
    if (leftPeers()) guard.emplace(grace_);
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) logError(detail::cat("MPI_Finalize: ", detail::mpiErrorText(rc)));
  }
}

}  // namespace zrt::comm
