// Elapsed time as seconds in a double, the unit every ZRT timing reports in (comm statistics,
// timeout and watchdog messages, the benchmarks' figures), measured on the steady clock, which
// never jumps with the wall clock. One definition, so every caller means the same clock.
// Pure function of the clock; thread-safe.
#pragma once

#include <chrono>

namespace zrt {

inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace zrt
