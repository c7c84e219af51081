// How many OpenMP threads each rank computes with. The model's kernels are OpenMP loops whose
// threads spin while they wait; ranks that together start more threads than the node has cores
// spin against each other and a step can take a thousand times longer (measured: 0.003 s against
// 3 s for a 2 x 32 model on 2 ranks of a 2-core machine). So, unless OMP_NUM_THREADS says
// otherwise, each rank takes its share of the cores: cores / ranks on the node, at least one.
// Thread-safety: call once, from the main thread, before the first parallel region.
#pragma once

#include <mpi.h>

namespace zrt::trainer {

// max(1, cores / ranksOnNode).
int shareOfCores(int cores, int ranksOnNode);

// This rank's place among the ranks on its node (collective over `comm`).
int rankOnNode(MPI_Comm comm);

// Sets the OpenMP thread count of this rank (collective over `comm`: counts the ranks sharing
// this node) unless OMP_NUM_THREADS is set, and returns the count in force.
int setThreadsPerRank(MPI_Comm comm);

}  // namespace zrt::trainer
