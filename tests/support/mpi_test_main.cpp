// main() of multi-rank doctest programs. Every rank runs every test case. Rank 0 prints its own
// report; any other rank prints its report only when it failed, prefixed with its rank, so a
// run on 4 ranks reads like a run on 1 unless something differs between ranks. The exit code is
// non-zero on every rank when any rank failed.

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "comm/mpi_env.h"
#include "comm/mpi_check.h"
#include "comm/mpi/mpi_leak_check.h"
#include "core/build_config.h"
#include "core/device.h"
#include "tests/support/mpi_test.h"

namespace zrt::test {
namespace {
MPI_Comm g_testComm = MPI_COMM_NULL;
int g_rank = 0;
int g_size = 1;
}  // namespace

int worldRank() { return g_rank; }
int worldSize() { return g_size; }
MPI_Comm testComm() { return g_testComm; }

bool allRanks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  ZRT_CHECK_MPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, g_testComm));
  return all == 1;
}

}  // namespace zrt::test

int main(int argc, char** argv) {
  // A program registered for the GPU (ZRT_TEST_DEVICE=cuda..., label cuda) is skipped, before
  // MPI starts, where no CUDA device answers: every rank decides alike and exits 77.
  if (const char* d = std::getenv("ZRT_TEST_DEVICE"); d && std::string(d).rfind("cuda", 0) == 0 &&
                                                       !zrt::cudaDeviceAvailable()) {
    std::printf("skipped: ZRT_TEST_DEVICE=%s and %s\n", d,
                ZRT_HAVE_CUDA ? "no CUDA device answers on this machine"
                              : "this build has no CUDA (ZRT_CUDA=OFF)");
    return 77;
  }
  // Under AddressSanitizer the environment checks for leaks before MPI_Finalize, after every
  // test's objects are gone (comm/mpi/mpi_leak_check.h).
  zrt::comm::MpiEnvironment env(&argc, &argv);
  zrt::test::g_rank = env.rank();
  zrt::test::g_size = env.size();
  {
    zrt::comm::UntrackedAllocations mpiOwn;  // what Open MPI keeps for the duplicate, as for MPI_Init
    ZRT_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &zrt::test::g_testComm));
  }

  std::ostringstream report;
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  ctx.setCout(&report);
  int failed = ctx.run();
  if (ctx.shouldExit()) {
    std::cout << report.str();
    MPI_Comm_free(&zrt::test::g_testComm);
    return failed;
  }

  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, zrt::test::g_testComm);
  // Print in rank order so reports do not interleave.
  for (int r = 0; r < env.size(); ++r) {
    if (r == env.rank() && (r == 0 || failed)) {
      std::string text = report.str();
      if (r != 0) {
        std::string prefixed;
        std::istringstream lines(text);
        for (std::string line; std::getline(lines, line);)
          prefixed += "[rank " + std::to_string(r) + "] " + line + "\n";
        text = prefixed;
      }
      std::cout << text << std::flush;
    }
    MPI_Barrier(zrt::test::g_testComm);
  }
  if (env.rank() == 0) {
    std::cout << "[" << env.size() << " rank(s)] " << (anyFailed ? "FAILED" : "passed")
              << std::endl;
  }
  MPI_Comm_free(&zrt::test::g_testComm);
  return anyFailed ? 1 : 0;
}
