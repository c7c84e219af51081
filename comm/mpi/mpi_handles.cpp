#include "comm/mpi/mpi_handles.h"

#include "comm/mpi_check.h"
#include "runtime/log.h"

namespace zrt::comm {
namespace {

bool mpiLive() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return !finalized;
}

void logIfFailed(int rc, const char* what) {
  if (rc != MPI_SUCCESS) logError(detail::cat(what, " failed: ", detail::mpiErrorText(rc)));
}

}  // namespace

MpiCommHandle& MpiCommHandle::operator=(MpiCommHandle&& o) noexcept {
  if (this != &o) {
    reset();
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

MpiCommHandle MpiCommHandle::dup(MPI_Comm comm) {
  MPI_Comm out = MPI_COMM_NULL;
  ZRT_CHECK_MPI(MPI_Comm_dup(comm, &out));
  MpiCommHandle h(out);
  ZRT_CHECK_MPI(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return h;
}

MpiCommHandle MpiCommHandle::split(MPI_Comm comm, int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  ZRT_CHECK_MPI(MPI_Comm_split(comm, color, key, &out));
  MpiCommHandle h(out);
  if (out != MPI_COMM_NULL) ZRT_CHECK_MPI(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return h;
}

void MpiCommHandle::reset() noexcept {
  if (comm_ == MPI_COMM_NULL) return;
  if (mpiLive()) logIfFailed(MPI_Comm_free(&comm_), "MPI_Comm_free");
  comm_ = MPI_COMM_NULL;
}

void MpiWindowHandle::adopt(MPI_Win win) {
  reset();
  win_ = win;
  ZRT_CHECK_MPI(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN));
  ZRT_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
  locked_ = true;
}

void MpiWindowHandle::reset() noexcept {
  if (win_ == MPI_WIN_NULL) return;
  if (mpiLive()) {
    if (locked_) logIfFailed(MPI_Win_unlock_all(win_), "MPI_Win_unlock_all");
    logIfFailed(MPI_Win_free(&win_), "MPI_Win_free");
  }
  win_ = MPI_WIN_NULL;
  locked_ = false;
}

}  // namespace zrt::comm
