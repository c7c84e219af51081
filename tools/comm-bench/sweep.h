// The size sweep: for every operation and size, ZRT's collectives through each path (blocking
// and posted to the progress thread), the same operation through raw MPI calls and a memcpy of
// the same size on every rank, in the same run, interleaved so machine noise hits all alike;
// prints size, time, algbw, busbw, raw MPI busbw, the ratio, the copy bound and the fraction of
// it reached, and checks every result.
#pragma once

#include "tools/comm-bench/bench_options.h"

namespace zrt::bench {

// Returns false when a result was wrong on some rank.
bool runSweep(const BenchOptions& options);

}  // namespace zrt::bench
