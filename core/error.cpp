#include "core/error.h"

#include <atomic>
#include <cstring>

namespace zrt {
namespace {
std::atomic<int> g_rank{-1};
}

void setProcessRank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }
int processRank() noexcept { return g_rank.load(std::memory_order_relaxed); }

std::string_view withoutRankPrefix(std::string_view message) noexcept {
  if (!message.starts_with("[rank ")) return message;
  const std::size_t end = message.find("] ");
  return end == std::string_view::npos ? message : message.substr(end + 2);
}

namespace detail {

std::string where(const char* file, int line) {
  // Trim the build machine's absolute path: "runtime/engine.cpp" reads better than
  // "/work/main/runtime/engine.cpp" and does not leak paths into logs. The first floor folder
  // after the last "/" that could be the checkout's root is where the repository's path starts.
  std::string_view f(file);
  std::size_t best = std::string_view::npos;
  for (std::string_view root : {"/core/", "/comm/", "/offload/", "/partition/", "/runtime/", "/python/",
                                "/tools/", "/tests/"}) {
    if (f.compare(0, root.size() - 1, root.substr(1)) == 0) {
      best = 0;  // already relative
      break;
    }
    if (auto pos = f.rfind(root); pos != std::string_view::npos && (best == std::string_view::npos || pos < best))
      best = pos + 1;
  }
  if (best != std::string_view::npos) f.remove_prefix(best);
  int rank = processRank();
  std::string out;
  if (rank >= 0) out = cat("[rank ", rank, "] ");
  out += cat(f, ":", line, ": ");
  return out;
}

}  // namespace detail
}  // namespace zrt
