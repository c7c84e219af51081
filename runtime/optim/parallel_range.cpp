#include "runtime/optim/detail/parallel_range.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

namespace zrt::optim::detail {

int threadsFor(std::size_t count, int requested) {
  const int want = requested > 0 ? requested : omp_get_max_threads();
  const std::size_t byWork = std::max<std::size_t>(1, count / kMinElementsPerThread);
  return static_cast<int>(
      std::min<std::size_t>(static_cast<std::size_t>(std::max(want, 1)), byWork));
}

namespace {

// The first index at or after `idx` whose float in `anchor` starts a 64-byte line (capped at
// `end`).
std::size_t alignUp(std::size_t idx, std::size_t end, const void* anchor) {
  constexpr std::uintptr_t kLine = 64;
  const std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(anchor) + idx * sizeof(float);
  const std::uintptr_t past = addr % kLine;
  const std::size_t up = past == 0 ? 0 : (kLine - past) / sizeof(float);
  return std::min(idx + up, end);
}

}  // namespace

void parallelRange(std::size_t begin, std::size_t end, const void* anchor, int requestedThreads,
                   const std::function<void(std::size_t, std::size_t)>& fn) {
  if (end <= begin) return;
  const std::size_t count = end - begin;
  const int threads = threadsFor(count, requestedThreads);
  if (threads <= 1) {
    fn(begin, end);
    return;
  }
  // Pieces handed out dynamically: a thread that shares its core with something else (another
  // process, a communication thread) takes fewer pieces instead of holding up the whole step.
  const std::size_t perThread =
      (count + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  const std::size_t piece = std::min(perThread, kPieceElements);
  const auto pieces = static_cast<std::int64_t>((count + piece - 1) / piece);
  std::exception_ptr error;
  std::mutex errorMu;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (std::int64_t k = 0; k < pieces; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const std::size_t lo = uk == 0 ? begin : alignUp(begin + uk * piece, end, anchor);
    const std::size_t hi = alignUp(begin + std::min(count, (uk + 1) * piece), end, anchor);
    try {
      if (lo < hi) fn(lo, hi);
    } catch (...) {
      std::lock_guard lock(errorMu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace zrt::optim::detail
