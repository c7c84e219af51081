// The shared-memory algorithms of the MPI backend for all-reduce, reduce-scatter and all-gather.
// Inside a node every rank copies its input into its own staging half, then reduces its slice
// of every peer's staging in place, all ranks (all cores) at once, and reads the results back
// from the peers' staging; large buffers go through in rounds of one staging half, alternating
// halves so one barrier per phase suffices. Over several nodes the path is hierarchical: reduce
// (or gather) inside the node into the leader, MPI between node leaders, then back out through
// shared memory. Sums are added in local-rank order in fp32 and rounded once per node.
// Every function is collective over the world the team was built on.
// Thread-safety: one thread at a time per team (the communicator's progress thread).
#pragma once

#include <chrono>
#include <cstddef>

#include "comm/collective.h"
#include "comm/mpi/mpi_reduce_ops.h"
#include "comm/mpi/shm/shm_team.h"

namespace zrt::comm {

struct ShmContext {
  ShmTeam& team;
  const MpiReduceOps& ops;
  std::chrono::steady_clock::time_point deadline;  // barriers give up here
  const char* what;                                // names the operation in errors
  std::size_t maxMpiCount;                         // elements per MPI call between leaders
};

void shmAllReduce(const ShmContext& ctx, const Collective& op);
void shmReduceScatter(const ShmContext& ctx, const Collective& op);
void shmAllGather(const ShmContext& ctx, const Collective& op);

}  // namespace zrt::comm
