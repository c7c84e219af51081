#include "core/error.h"

#include <atomic>
#include <cstring>
#include <exception>

namespace zrt {
namespace {
std::atomic<int> g_rank{-1};
}

void setProcessRank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }
int processRank() noexcept { return g_rank.load(std::memory_order_relaxed); }

std::string_view withoutRankPrefix(std::string_view message) noexcept {
  constexpr std::string_view open = "[rank ";
  if (message.substr(0, open.size()) != open) return message;
  std::size_t i = open.size();
  while (i < message.size() && message[i] >= '0' && message[i] <= '9') ++i;
  if (i == open.size() || message.substr(i, 2) != "] ") return message;
  return message.substr(i + 2);
}

namespace {
// The uncaught-exception count while the marked exception unwinds; -1 when none is marked.
// where() clears it: every later ZRT error is built through it, so a mark does not outlive
// the exception it was made for (one that was caught, say, and a new one at the same depth).
thread_local int t_agreedDepth = -1;
}  // namespace

void markThrowAgreed() noexcept { t_agreedDepth = std::uncaught_exceptions() + 1; }

bool unwindingAgreedFailure() noexcept {
  return t_agreedDepth >= 0 && std::uncaught_exceptions() == t_agreedDepth;
}

namespace detail {

std::string where(const char* file, int line) {
  t_agreedDepth = -1;
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
