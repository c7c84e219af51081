#include "comm/mpi/mpi_handles.h"

#include <thread>

#include "comm/mpi/left_peers.h"
#include "comm/mpi_check.h"
#include "core/log.h"

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
  if (mpiLive() && !skipCollectiveTeardown("MPI_Comm_free"))
    logIfFailed(MPI_Comm_free(&comm_), "MPI_Comm_free");
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
  if (mpiLive() && !skipCollectiveTeardown("MPI_Win_free")) {
    if (locked_) logIfFailed(MPI_Win_unlock_all(win_), "MPI_Win_unlock_all");
    logIfFailed(MPI_Win_free(&win_), "MPI_Win_free");
  }
  win_ = MPI_WIN_NULL;
  locked_ = false;
}

MpiInfoHandle::MpiInfoHandle() { ZRT_CHECK_MPI(MPI_Info_create(&info_)); }

MpiInfoHandle::~MpiInfoHandle() {
  if (info_ != MPI_INFO_NULL && mpiLive()) logIfFailed(MPI_Info_free(&info_), "MPI_Info_free");
}

void MpiInfoHandle::set(const char* key, const char* value) {
  ZRT_CHECK_MPI(MPI_Info_set(info_, key, value));
}

MpiRequest& MpiRequest::operator=(MpiRequest&& o) noexcept {
  if (this != &o) {
    reset();
    req_ = o.req_;
    recv_ = o.recv_;
    o.req_ = MPI_REQUEST_NULL;
  }
  return *this;
}

MpiRequest MpiRequest::isend(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                             MPI_Comm comm) {
  MpiRequest r;
  ZRT_CHECK_MPI(MPI_Isend(buf, count, type, dest, tag, comm, &r.req_));
  return r;
}

MpiRequest MpiRequest::irecv(void* buf, int count, MPI_Datatype type, int source, int tag,
                             MPI_Comm comm) {
  MpiRequest r;
  r.recv_ = true;
  ZRT_CHECK_MPI(MPI_Irecv(buf, count, type, source, tag, comm, &r.req_));
  return r;
}

bool MpiRequest::test(MPI_Status* status) {
  if (req_ == MPI_REQUEST_NULL) return true;
  int done = 0;
  ZRT_CHECK_MPI(MPI_Test(&req_, &done, status));
  return done != 0;
}

void MpiRequest::reset() noexcept {
  if (req_ == MPI_REQUEST_NULL) return;
  if (!mpiLive()) {
    req_ = MPI_REQUEST_NULL;
    return;
  }
  int done = 0;
  logIfFailed(MPI_Test(&req_, &done, MPI_STATUS_IGNORE), "MPI_Test");
  // A receive nobody will match is cancelled; a send (a few bytes, sent eagerly) completes alone.
  if (!done && recv_) logIfFailed(MPI_Cancel(&req_), "MPI_Cancel");
  // Waits for the cancellation or the send to complete, at most kReleaseWait.
  const auto deadline = std::chrono::steady_clock::now() + kReleaseWait;
  while (!done && req_ != MPI_REQUEST_NULL) {
    const int rc = MPI_Test(&req_, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      logIfFailed(rc, "MPI_Test");
      break;
    }
    if (done || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (!done && req_ != MPI_REQUEST_NULL) {
    logError(detail::cat("an MPI ", recv_ ? "receive" : "send", " was still pending ",
                         kReleaseWait.count(), " ms after it was released; freeing it"));
    logIfFailed(MPI_Request_free(&req_), "MPI_Request_free");
  }
  req_ = MPI_REQUEST_NULL;
}

}  // namespace zrt::comm
