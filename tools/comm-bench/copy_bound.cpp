#include "tools/comm-bench/copy_bound.h"

namespace zrt::bench {

Traffic trafficPerRank(comm::OpKind kind, std::uint64_t bytes, int ranks) {
  const double n = ranks, b = static_cast<double>(bytes);
  switch (kind) {
    case comm::OpKind::AllReduce: return {b, b};
    case comm::OpKind::ReduceScatter: return {b, b / n};
    default: return {b / n, b};
  }
}

double boundSeconds(const Traffic& t, std::uint64_t copyBytes, double copySeconds) {
  return t.total() / (2.0 * static_cast<double>(copyBytes)) * copySeconds;
}

}  // namespace zrt::bench
