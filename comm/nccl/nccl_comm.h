// NcclComm: the move-only owner of one ncclComm_t. destroy() flushes outstanding work
// (ncclCommFinalize) and frees the communicator; abort() tears it down at once, for a peer that
// is gone or an operation that hangs. The destructor destroys, logging a failure instead of
// throwing.
// Thread-safety: none; one owner.
#pragma once

#include <nccl.h>

namespace zrt::comm {

class NcclComm {
 public:
  NcclComm() = default;
  // ncclCommInitRank: blocks until all `nranks` ranks joined with the same id.
  static NcclComm initRank(int nranks, const ncclUniqueId& id, int rank);
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept : comm_(o.comm_) { o.comm_ = nullptr; }
  NcclComm& operator=(NcclComm&& o) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }
  void destroy();
  void abort() noexcept;

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace zrt::comm
