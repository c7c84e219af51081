// NcclApi: the NCCL functions ZRT calls, looked up in libnccl.so.2 at the first ncclApi() instead
// of linked, so that no program needs NCCL (218 MB) to start: one that never builds an NCCL
// communicator runs without it, and one that does finds it on the loader's path or, in a process
// that imported torch first, gets torch's. nccl.h stays a build dependency: the types, constants
// and NCCL_CONFIG_INITIALIZER (plain data carrying the header's version, no symbol) come from it,
// and each pointer's type is its function's declaration there.
// Thread-safety: ncclApi() may be called from any thread; the first call loads, the others wait
// for it and then share the table, which never changes.
#pragma once

#include <nccl.h>

namespace zrt::comm {

struct NcclApi {
  decltype(&::ncclGetUniqueId) getUniqueId;
  decltype(&::ncclCommInitRankConfig) commInitRankConfig;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError;
  decltype(&::ncclCommFinalize) commFinalize;
  decltype(&::ncclCommDestroy) commDestroy;
  decltype(&::ncclCommAbort) commAbort;
  decltype(&::ncclGetErrorString) getErrorString;
  decltype(&::ncclGetLastError) getLastError;
  decltype(&::ncclGroupStart) groupStart;
  decltype(&::ncclGroupEnd) groupEnd;
  decltype(&::ncclAllReduce) allReduce;
  decltype(&::ncclBroadcast) broadcast;
  decltype(&::ncclReduce) reduce;
  decltype(&::ncclReduceScatter) reduceScatter;
  decltype(&::ncclAllGather) allGather;
};

// The table, loaded at the first call. Throws ExternalError naming libnccl.so.2 (or the missing
// symbol) and how to provide it when it cannot be loaded; a later call tries again.
const NcclApi& ncclApi();

}  // namespace zrt::comm
