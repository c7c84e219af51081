#include "threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "comm/mpi_check.h"

namespace zrt::trainer {

int shareOfCores(int cores, int ranksOnNode) { return std::max(1, cores / std::max(1, ranksOnNode)); }

namespace {

// This rank's place among the ranks sharing its node: {rank, size}. Collective.
std::pair<int, int> placeOnNode(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  ZRT_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rank = 0, size = 1;
  ZRT_CHECK_MPI(MPI_Comm_rank(node, &rank));
  ZRT_CHECK_MPI(MPI_Comm_size(node, &size));
  ZRT_CHECK_MPI(MPI_Comm_free(&node));
  return {rank, size};
}

}  // namespace

int rankOnNode(MPI_Comm comm) { return placeOnNode(comm).first; }

int setThreadsPerRank(MPI_Comm comm) {
  const int ranksOnNode = placeOnNode(comm).second;
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env && *env) return omp_get_max_threads();
  // The cores this process may run on (its affinity mask, which mpirun or a container may
  // narrow), not the machine's.
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : omp_get_num_procs();
  const int threads = shareOfCores(cores, ranksOnNode);
  omp_set_num_threads(threads);
  return threads;
}

}  // namespace zrt::trainer
