#include "comm/nccl/nccl_api.h"

#include <memory>

#include "core/shared_library.h"

namespace zrt::comm {
namespace {

// NCCL's soname: its major version has been 2 since 2017, and the header says which.
constexpr const char* kNcclSoname = "libnccl.so." ZRT_EXPANDED_STRING(NCCL_MAJOR);

struct LoadedNccl {
  SharedLibrary library;
  NcclApi api;
};

std::unique_ptr<LoadedNccl> loadNccl() {
  auto nccl = std::make_unique<LoadedNccl>();
  nccl->library = SharedLibrary::open(
      kNcclSoname,
      "with torch's CUDA wheels it is site-packages/nvidia/nccl/lib (pip package "
      "nvidia-nccl-cu13)");
  const SharedLibrary& lib = nccl->library;
  NcclApi& api = nccl->api;
#define ZRT_NCCL_LOAD(field, function) api.field = ZRT_LIBRARY_FUNCTION(lib, function)
  ZRT_NCCL_LOAD(getUniqueId, ncclGetUniqueId);
  ZRT_NCCL_LOAD(commInitRankConfig, ncclCommInitRankConfig);
  ZRT_NCCL_LOAD(commGetAsyncError, ncclCommGetAsyncError);
  ZRT_NCCL_LOAD(commFinalize, ncclCommFinalize);
  ZRT_NCCL_LOAD(commDestroy, ncclCommDestroy);
  ZRT_NCCL_LOAD(commAbort, ncclCommAbort);
  ZRT_NCCL_LOAD(getErrorString, ncclGetErrorString);
  ZRT_NCCL_LOAD(getLastError, ncclGetLastError);
  ZRT_NCCL_LOAD(groupStart, ncclGroupStart);
  ZRT_NCCL_LOAD(groupEnd, ncclGroupEnd);
  ZRT_NCCL_LOAD(allReduce, ncclAllReduce);
  ZRT_NCCL_LOAD(broadcast, ncclBroadcast);
  ZRT_NCCL_LOAD(reduce, ncclReduce);
  ZRT_NCCL_LOAD(reduceScatter, ncclReduceScatter);
  ZRT_NCCL_LOAD(allGather, ncclAllGather);
#undef ZRT_NCCL_LOAD
  return nccl;
}

}  // namespace

const NcclApi& ncclApi() {
  // Never freed, so NCCL is never unloaded: communicators owned by other statics may be
  // destroyed after this one would be, and NCCL's own threads run until the process exits.
  static const LoadedNccl* const nccl = loadNccl().release();
  return nccl->api;
}

}  // namespace zrt::comm
