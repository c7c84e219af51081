#include "comm/nccl/nccl_comm.h"

#include <thread>

#include "comm/nccl/nccl_check.h"
#include "core/log.h"
#include "core/timing.h"

namespace zrt::comm {

NcclComm NcclComm::initRank(int nranks, const ncclUniqueId& id, int rank,
                            std::chrono::milliseconds timeout) {
  NcclComm c;
  c.timeout_ = timeout;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t rc = ncclApi().commInitRankConfig(&c.comm_, nranks, id, rank, &config);
  const std::string what = detail::cat("ncclCommInitRankConfig (rank ", rank, " of ", nranks,
                                       "; every rank must join with the same id)");
  if (rc != ncclSuccess && rc != ncclInProgress) {
    // A communicator handed back with a failure is torn down here (its destructor would try to
    // finalise it).
    c.abort();
    ZRT_THROW(ExternalError, what, " failed: ", ncclApi().getErrorString(rc), " (",
              ncclApi().getLastError(nullptr), ")");
  }
  try {
    c.settle(rc, what.c_str());
  } catch (...) {
    c.abort();  // half built: abort, never finalise
    throw;
  }
  return c;
}

NcclComm::~NcclComm() {
  if (!comm_) return;
  try {
    destroy();
  } catch (const std::exception& e) {
    logError(detail::cat("destroying an NCCL communicator: ", e.what(), "; aborting it"));
    abort();
  }
}

NcclComm::NcclComm(NcclComm&& o) noexcept : comm_(o.comm_), timeout_(o.timeout_) {
  o.comm_ = nullptr;
}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    if (comm_) {
      try {
        destroy();
      } catch (const std::exception& e) {
        logError(detail::cat("replacing an NCCL communicator: ", e.what(), "; aborting it"));
        abort();
      }
    }
    comm_ = o.comm_;
    timeout_ = o.timeout_;
    interrupted_ = false;
    o.comm_ = nullptr;
  }
  return *this;
}

void NcclComm::settle(ncclResult_t rc, const char* call) {
  if (rc == ncclSuccess) return;
  if (rc != ncclInProgress)
    ZRT_THROW(ExternalError, "NCCL call ", call, " failed: ", ncclApi().getErrorString(rc), " (",
              ncclApi().getLastError(comm_), ")");
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout_;
  // Waits for the call to finish in the background: polls the communicator's state, with a
  // sleep growing to 1 ms, until it leaves ncclInProgress or the deadline passes.
  auto sleep = std::chrono::microseconds(1);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ZRT_CHECK_NCCL(ncclApi().commGetAsyncError(comm_, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress)
      ZRT_THROW(ExternalError, "NCCL call ", call,
                " failed in the background: ", ncclApi().getErrorString(state), " (",
                ncclApi().getLastError(comm_), ")");
    if (interrupted_) ZRT_THROW(PeerError, "NCCL call ", call, " interrupted: the communicator is being aborted");
    if (std::chrono::steady_clock::now() > deadline)
      ZRT_THROW(TimeoutError, "NCCL call ", call, " still in progress after ",
                secondsSince(start),
                " s (timeout ", static_cast<double>(timeout_.count()) / 1000.0,
                " s): a peer has not joined or is not progressing");
    std::this_thread::sleep_for(sleep);
    if (sleep < std::chrono::milliseconds(1)) sleep *= 2;
  }
}

void NcclComm::destroy() {
  if (!comm_) return;
  settle(ncclApi().commFinalize(comm_), "ncclCommFinalize");  // a throw leaves comm_ to abort()
  ncclComm_t c = comm_;
  comm_ = nullptr;
  ZRT_CHECK_NCCL(ncclApi().commDestroy(c));
}

void NcclComm::abort() noexcept {
  if (!comm_) return;
  const ncclResult_t rc = ncclApi().commAbort(comm_);
  if (rc != ncclSuccess) logError(detail::cat("ncclCommAbort: ", ncclApi().getErrorString(rc)));
  comm_ = nullptr;
}

}  // namespace zrt::comm
