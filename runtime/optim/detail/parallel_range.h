// Internal: runs a kernel over [begin, end) on several threads (OpenMP). The range is cut into
// contiguous pieces of up to kPieceElements (fewer, equal pieces when the range is short) that
// threads take one at a time, so a thread slowed by a busy core takes fewer; piece boundaries
// fall on 64-byte boundaries of `anchor` (the parameter array), so no cache line of it is
// written by two threads. Ranges too small to be worth a thread's start-up run on fewer
// threads (down to one, with no OpenMP region at all).
// Blocks until every piece is done; rethrows the first exception a piece raised.
// Thread-safe: concurrent calls from different threads get separate OpenMP teams.
#pragma once

#include <cstddef>
#include <functional>

namespace zrt::optim::detail {

// Fewest elements a thread is given (128 KiB of fp32 parameters): below this a thread's
// start-up costs more than its share of the work.
inline constexpr std::size_t kMinElementsPerThread = std::size_t{1} << 15;

// Largest piece a thread takes at a time (1 MiB of fp32 parameters): long enough for the
// hardware prefetchers to stream, short enough to balance threads on shared cores.
inline constexpr std::size_t kPieceElements = std::size_t{1} << 18;

// The number of threads a range of `count` elements runs on when `requested` are asked for
// (0: OpenMP's default).
int threadsFor(std::size_t count, int requested);

void parallelRange(std::size_t begin, std::size_t end, const void* anchor, int requestedThreads,
                   const std::function<void(std::size_t, std::size_t)>& fn);

}  // namespace zrt::optim::detail
