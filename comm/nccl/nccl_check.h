// ZRT_CHECK_NCCL: every NCCL call goes through it. A failure throws ExternalError with
// "[rank R] file:line", the call's text, ncclGetErrorString and NCCL's last error message
// (which names the peer or transport that failed), both through ncclApi() as every NCCL call is
// (comm/nccl/nccl_api.h). ncclInProgress is a failure here: ZRT's communicators are nonblocking,
// and a call that may return it goes through NcclComm::settle (comm/nccl/nccl_comm.h), which
// waits for it with a bound.
// Thread-safe: it throws on the calling thread.
#pragma once

#include <nccl.h>

#include "comm/nccl/nccl_api.h"
#include "core/error.h"

#define ZRT_CHECK_NCCL(call)                                               \
  do {                                                                     \
    ncclResult_t zrt_nccl_rc_ = (call);                                    \
    if (zrt_nccl_rc_ != ncclSuccess) {                                     \
      ZRT_THROW(::zrt::ExternalError, "NCCL call `" #call "` failed: ",    \
                ::zrt::comm::ncclApi().getErrorString(zrt_nccl_rc_), " (", \
                ::zrt::comm::ncclApi().getLastError(nullptr), ")");        \
    }                                                                      \
  } while (0)
