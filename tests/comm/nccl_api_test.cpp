// NCCL opened at the first call, without a GPU: libnccl.so.2 either loads with every function ZRT
// names (and answers a call that needs no device), or the error names it and says how to provide
// it. A symbol the library lacks fails either way.
#include "comm/nccl/nccl_api.h"

#include <doctest/doctest.h>

#include <string>

#include "core/error.h"

using namespace zrt;

TEST_CASE("ncclApi() loads NCCL once, or says how to provide it") {
  try {
    const comm::NcclApi& api = comm::ncclApi();
    CHECK(std::string(api.getErrorString(ncclInvalidArgument)).size() > 0);
    CHECK(&comm::ncclApi() == &api);
    MESSAGE("libnccl loaded: ncclInvalidArgument reads \"",
            std::string(api.getErrorString(ncclInvalidArgument)), "\"");
  } catch (const ExternalError& e) {
    const std::string w = e.what();
    MESSAGE("libnccl not loaded: ", w);
    CHECK(w.find("libnccl.so.2 not found") != std::string::npos);
    CHECK(w.find("LD_LIBRARY_PATH") != std::string::npos);
    CHECK(w.find("nvidia/nccl/lib") != std::string::npos);
  }
}
