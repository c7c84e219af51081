#include "core/error.h"

#include <atomic>
#include <cstring>

namespace zrt {
namespace {
std::atomic<int> g_rank{-1};
}

void setProcessRank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }
int processRank() noexcept { return g_rank.load(std::memory_order_relaxed); }

namespace detail {

std::string where(const char* file, int line) {
  // Trim the build machine's absolute path: "runtime/device.cpp" reads better than
  // "/work/main/runtime/device.cpp" and does not leak paths into logs.
  std::string_view f(file);
  for (std::string_view root : {"/runtime/", "/partition/", "/comm/", "/offload/", "/tools/",
                                "/tests/"}) {
    if (auto pos = f.rfind(root); pos != std::string_view::npos) {
      f.remove_prefix(pos + 1);
      break;
    }
  }
  int rank = processRank();
  std::string out;
  if (rank >= 0) out = cat("[rank ", rank, "] ");
  out += cat(f, ":", line, ": ");
  return out;
}

}  // namespace detail
}  // namespace zrt
