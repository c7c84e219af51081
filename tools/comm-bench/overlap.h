// The overlap measurement: a simulated backward of `layers` layers whose gradients are reduce-
// scattered in buckets (stage 2) while later layers compute. Each layer computes for as long as
// one bucket's reduce-scatter takes alone (measured first), either sleeping (the host thread idle,
// as while a GPU computes) or spinning (the host CPU busy). Reports the communication time, the
// part the backward had to wait for (exposed) and the fraction hidden, with overlap_comm on and off.
#pragma once

#include "tools/comm-bench/bench_options.h"

namespace zrt::bench {

void runOverlap(const BenchOptions& options);

}  // namespace zrt::bench
