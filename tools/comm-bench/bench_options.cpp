#include "tools/comm-bench/bench_options.h"

#include "comm/mpi_check.h"

namespace zrt::bench {

double maxOverRanks(double v, MPI_Comm comm) {
  double out = v;
  ZRT_CHECK_MPI(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm));
  return out;
}

bool allRanksTrue(bool v, MPI_Comm comm) {
  int in = v ? 1 : 0, out = 0;
  ZRT_CHECK_MPI(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, comm));
  return out == 1;
}

}  // namespace zrt::bench
