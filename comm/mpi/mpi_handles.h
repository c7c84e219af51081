// Move-only RAII owners of MPI handles ZRT creates: communicators (MPI_Comm_free) and windows
// (MPI_Win_unlock_all when locked, then MPI_Win_free). Destruction after MPI_Finalize does
// nothing; a failure while freeing is logged, never thrown (destructors do not throw).
// Freeing a communicator or window is collective: owners are destroyed on every rank together.
// Thread-safety: none; one owner, one thread.
#pragma once

#include <mpi.h>

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

}  // namespace zrt::comm
