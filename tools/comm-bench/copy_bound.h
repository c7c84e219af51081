// The physical limit of a collective on one node: the memory traffic each rank must move whatever
// the algorithm, priced at the rate of a plain memcpy measured in the same run. A collective's
// time against this bound says how much of the machine it uses, where a ratio to raw MPI only
// says how it compares with another implementation.
#pragma once

#include <cstdint>

#include "comm/collective.h"

namespace zrt::bench {

// Bytes one rank must read and write for `kind` on `bytes` (N, the full buffer, nccl-tests' size)
// with `ranks` (n) ranks, out of place, each rank doing an equal share, reading every input byte
// once and writing every output byte once (a rank may write straight into its peers' outputs, as
// a shared-memory implementation can, so no result is read back):
//   all_reduce:     read its N of input; write N of outputs (its reduced segment, to every rank)
//   reduce_scatter: read its N of input (its segment of every rank's input); write N/n
//   all_gather:     read its N/n contribution; write N of outputs (its part, to every rank)
// No algorithm moves less; one that pulls peers' data into its own output reads more.
struct Traffic {
  double read = 0, written = 0;
  double total() const { return read + written; }
};
Traffic trafficPerRank(comm::OpKind kind, std::uint64_t bytes, int ranks);

// The least time that traffic takes at memcpy's rate: a memcpy of `copyBytes` taking
// `copySeconds` moved copyBytes read + copyBytes written, so reads and writes are priced alike.
double boundSeconds(const Traffic& t, std::uint64_t copyBytes, double copySeconds);

}  // namespace zrt::bench
