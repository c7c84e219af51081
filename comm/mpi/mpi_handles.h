// Move-only RAII owners of MPI handles ZRT creates: communicators (MPI_Comm_free), windows
// (MPI_Win_unlock_all when locked, then MPI_Win_free), info objects (MPI_Info_free) and
// nonblocking point-to-point requests (MpiRequest: cancelled when a receive, waited for a bounded
// time, then released). Destruction after MPI_Finalize does nothing; a failure while freeing is
// logged, never thrown (destructors do not throw).
// Freeing a communicator or window is collective: owners are destroyed on every rank together.
// Thread-safety: none; one owner, one thread.
#pragma once

#include <mpi.h>

#include <utility>

#include <chrono>

namespace zrt::comm {

class MpiCommHandle {
 public:
  MpiCommHandle() = default;
  explicit MpiCommHandle(MPI_Comm comm) : comm_(comm) {}
  ~MpiCommHandle() { reset(); }
  MpiCommHandle(MpiCommHandle&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  MpiCommHandle& operator=(MpiCommHandle&& o) noexcept;
  MpiCommHandle(const MpiCommHandle&) = delete;
  MpiCommHandle& operator=(const MpiCommHandle&) = delete;

  // MPI_Comm_dup of `comm` with MPI_ERRORS_RETURN, so ZRT_CHECK_MPI sees error codes.
  static MpiCommHandle dup(MPI_Comm comm);
  // MPI_Comm_split (a null handle for MPI_UNDEFINED colours), with MPI_ERRORS_RETURN.
  static MpiCommHandle split(MPI_Comm comm, int color, int key);

  MPI_Comm get() const { return comm_; }
  explicit operator bool() const { return comm_ != MPI_COMM_NULL; }
  void reset() noexcept;
  // Gives the communicator up without freeing it (it lives until MPI_Finalize).
  MPI_Comm release() noexcept { return std::exchange(comm_, MPI_COMM_NULL); }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class MpiWindowHandle {
 public:
  MpiWindowHandle() = default;
  ~MpiWindowHandle() { reset(); }
  MpiWindowHandle(MpiWindowHandle&& o) noexcept : win_(o.win_), locked_(o.locked_) {
    o.win_ = MPI_WIN_NULL;
    o.locked_ = false;
  }
  MpiWindowHandle& operator=(MpiWindowHandle&&) = delete;
  MpiWindowHandle(const MpiWindowHandle&) = delete;
  MpiWindowHandle& operator=(const MpiWindowHandle&) = delete;

  // Takes ownership of `win` and opens a passive-target epoch on every rank (MPI_Win_lock_all),
  // the usual way to load and store directly into a shared window.
  void adopt(MPI_Win win);
  MPI_Win get() const { return win_; }
  void reset() noexcept;

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  bool locked_ = false;
};

// An MPI_Info with MPI_Info_free on destruction; set() checks every call.
class MpiInfoHandle {
 public:
  MpiInfoHandle();  // MPI_Info_create
  ~MpiInfoHandle();
  MpiInfoHandle(const MpiInfoHandle&) = delete;
  MpiInfoHandle& operator=(const MpiInfoHandle&) = delete;

  void set(const char* key, const char* value);
  MPI_Info get() const { return info_; }

 private:
  MPI_Info info_ = MPI_INFO_NULL;
};

// One nonblocking send or receive. Its buffer must outlive it. Releasing a request still pending
// (reset, destruction, assignment) cancels it when it is a receive and waits up to `kReleaseWait`
// for it to complete; one still pending then is handed to MPI_Request_free and logged.
class MpiRequest {
 public:
  static constexpr std::chrono::milliseconds kReleaseWait{1000};

  MpiRequest() = default;
  ~MpiRequest() { reset(); }
  MpiRequest(MpiRequest&& o) noexcept : req_(o.req_), recv_(o.recv_) { o.req_ = MPI_REQUEST_NULL; }
  MpiRequest& operator=(MpiRequest&& o) noexcept;
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  static MpiRequest isend(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                          MPI_Comm comm);
  static MpiRequest irecv(void* buf, int count, MPI_Datatype type, int source, int tag,
                          MPI_Comm comm);

  bool pending() const { return req_ != MPI_REQUEST_NULL; }
  // MPI_Test: true once complete (then no longer pending); true for an empty request.
  bool test(MPI_Status* status = MPI_STATUS_IGNORE);
  void reset() noexcept;

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool recv_ = false;
};

}  // namespace zrt::comm
