// The size sweep: for every operation and size, ZRT's collectives through each path and the same
// operation through raw MPI calls, in the same run, interleaved so machine noise hits all alike;
// prints size, time, algbw, busbw, raw MPI busbw and the ratio, and checks every result.
#pragma once

#include "tools/comm-bench/bench_options.h"

namespace zrt::bench {

// Returns false when a result was wrong on some rank.
bool runSweep(const BenchOptions& options);

}  // namespace zrt::bench
