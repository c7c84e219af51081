// The physical limit of a collective on one node: the memory traffic each rank must move whatever
// the algorithm, priced at the rate of a plain memcpy measured in the same run. A collective's
// time against this bound says how much of the machine it uses, where a ratio to raw MPI only
// says how it compares with another implementation.
#pragma once

#include <cstdint>

#include "comm/collective.h"

namespace zrt::bench {

// Bytes one rank must read and write for `kind` on `bytes` (the full buffer, nccl-tests' size) with
// `ranks` ranks, each doing its share and reading peers' data in place (shared memory or a single
// copy), out of place:
//   all_reduce:     read its segment of every rank's input (N) and its peers' reduced segments
//                   (N(n-1)/n); write its whole output (N)
//   reduce_scatter: read its segment of every rank's input (N); write its output (N/n)
//   all_gather:     read every rank's contribution (N); write its whole output (N)
struct Traffic {
  double read = 0, written = 0;
  double total() const { return read + written; }
};
Traffic trafficPerRank(comm::OpKind kind, std::uint64_t bytes, int ranks);

// The least time that traffic takes at memcpy's rate: a memcpy of `copyBytes` taking
// `copySeconds` moved copyBytes read + copyBytes written, so reads and writes are priced alike.
double boundSeconds(const Traffic& t, std::uint64_t copyBytes, double copySeconds);

}  // namespace zrt::bench
