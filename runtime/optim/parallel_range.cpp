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
  std::exception_ptr error;
  std::mutex errorMu;
#pragma omp parallel num_threads(threads)
  {
    // OpenMP may grant fewer threads than asked (thread limits, nesting): split by the team.
    const std::size_t team = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t id = static_cast<std::size_t>(omp_get_thread_num());
    const std::size_t lo = id == 0 ? begin : alignUp(begin + count * id / team, end, anchor);
    const std::size_t hi =
        id + 1 == team ? end : alignUp(begin + count * (id + 1) / team, end, anchor);
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
