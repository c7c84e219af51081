// NcclComm: the move-only owner of one ncclComm_t, created nonblocking (ncclConfig_t blocking
// = 0) so that no NCCL call can hang the caller: joining the communicator, connecting peers on
// the first collective, and finalising all run in the background and are waited for here with a
// bound. destroy() flushes outstanding work (ncclCommFinalize, bounded) and frees the
// communicator; abort() tears it down at once, for a peer that is gone or an operation that
// hangs. The destructor destroys, logging a failure (and aborting) instead of throwing.
// Thread-safety: none; one owner. interrupt() alone may be called from any thread.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>

namespace zrt::comm {

class NcclComm {
 public:
  NcclComm() = default;
  // ncclCommInitRankConfig (nonblocking), then waits until all `nranks` ranks joined with the
  // same id; after `timeout` aborts the half-built communicator and throws TimeoutError naming
  // this rank and the world size. The calling thread's current CUDA device is the comm's.
  static NcclComm initRank(int nranks, const ncclUniqueId& id, int rank,
                           std::chrono::milliseconds timeout);
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept;
  NcclComm& operator=(NcclComm&& o) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }

  // For a call on this communicator that returned `rc`: ncclSuccess returns at once; an error
  // throws ExternalError naming `call`; ncclInProgress (the call goes on in the background)
  // waits until the communicator is idle, at most the timeout given to initRank, and throws
  // ExternalError with NCCL's error if it fails, TimeoutError naming `call` if it does not end,
  // PeerError if interrupt() was called meanwhile.
  void settle(ncclResult_t rc, const char* call);
  // Makes a settle() in progress on another thread give up (before an abort).
  void interrupt() { interrupted_ = true; }

  // ncclCommFinalize (waited for with the timeout) and ncclCommDestroy; throws on failure.
  void destroy();
  void abort() noexcept;

 private:
  ncclComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_{600'000};
  std::atomic<bool> interrupted_{false};
};

}  // namespace zrt::comm
