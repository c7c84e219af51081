#include "comm/nccl/nccl_comm.h"

#include "comm/nccl/nccl_check.h"
#include "runtime/log.h"

namespace zrt::comm {

NcclComm NcclComm::initRank(int nranks, const ncclUniqueId& id, int rank) {
  NcclComm c;
  ZRT_CHECK_NCCL(ncclCommInitRank(&c.comm_, nranks, id, rank));
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

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    if (comm_) abort();
    comm_ = o.comm_;
    o.comm_ = nullptr;
  }
  return *this;
}

void NcclComm::destroy() {
  if (!comm_) return;
  ncclComm_t c = comm_;
  comm_ = nullptr;
  ZRT_CHECK_NCCL(ncclCommFinalize(c));
  ZRT_CHECK_NCCL(ncclCommDestroy(c));
}

void NcclComm::abort() noexcept {
  if (!comm_) return;
  const ncclResult_t rc = ncclCommAbort(comm_);
  if (rc != ncclSuccess) logError(detail::cat("ncclCommAbort: ", ncclGetErrorString(rc)));
  comm_ = nullptr;
}

}  // namespace zrt::comm
