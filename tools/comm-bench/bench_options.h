// zrt-comm-bench's options (filled by main.cpp from the command line) and the helpers its two
// modes share: timing across ranks and the table/JSON output on rank 0.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zrt::bench {

struct BenchOptions {
  std::vector<std::string> ops;  // all_reduce, reduce_scatter, all_gather
  std::vector<std::string> paths;  // mpi, shm, in order (--overlap: repeats allowed)
  std::uint64_t minBytes = 1024;
  std::uint64_t maxBytes = std::uint64_t{256} << 20;
  int stepFactor = 2;
  DType dtype = DType::F32;
  int iters = 20;
  std::uint64_t itersBytesCap = std::uint64_t{512} << 20;  // fewer iterations for large sizes
  int warmup = 2;
  bool check = true;
  bool json = false;
  // Overlap mode: bucketed reduce-scatter beside a simulated backward.
  bool overlap = false;
  int layers = 16;
  std::uint64_t layerBytes = std::uint64_t{4} << 20;
  std::string compute = "both";  // sleep, spin, both
  int rounds = 7;                 // measurement rounds (medians and spread over them)
  int rank = 0;
  int size = 1;
};

// The slowest rank's value (what a collective's user waits for).
double maxOverRanks(double v, MPI_Comm comm);
bool allRanksTrue(bool v, MPI_Comm comm);

}  // namespace zrt::bench
