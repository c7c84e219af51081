#include "comm/mpi_env.h"

#include "comm/mpi_check.h"
#include "core/error.h"
#include "core/log.h"

namespace zrt::comm {

MpiEnvironment::MpiEnvironment(int* argc, char*** argv, int requiredThreadLevel) {
  int initialized = 0;
  ZRT_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    // MPI_Init_thread returns only on success under the default handler; a failure aborts.
    ZRT_CHECK_MPI(MPI_Init_thread(argc, argv, requiredThreadLevel, &provided_));
    owns_ = true;
  } else {
    ZRT_CHECK_MPI(MPI_Query_thread(&provided_));
  }
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
  if (!finalized) {
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) logError(detail::cat("MPI_Finalize: ", detail::mpiErrorText(rc)));
  }
}

}  // namespace zrt::comm
