// Helpers for multi-rank doctest programs. A multi-rank test is an ordinary TEST_CASE: the
// program's main (mpi_test_main.cpp) initialises MPI, runs every test case on every rank, and
// fails the job when any rank fails. Test cases ask for the world here. Use only collective-safe
// assertions (CHECK, not REQUIRE) around communication, so one failing rank does not leave the
// others waiting in a collective; every test also runs under ctest's timeout.
#pragma once

#include <mpi.h>

#include <string>

namespace zrt::test {

int worldRank();
int worldSize();
// A duplicate of MPI_COMM_WORLD reserved for tests' own checks, so they never match messages
// with the code under test.
MPI_Comm testComm();

// True on every rank when `ok` is true on all ranks; use to agree on a result before a CHECK.
bool allRanks(bool ok);

// A test case that needs at least n ranks states it here. Programs are registered only for the
// rank counts their cases need (zrt_add_mpi_test RANKS in cmake/ZrtTesting.cmake), so a smaller
// world is a registration mistake: the case fails saying so (on every rank alike, since every
// rank sees the same world size), instead of returning early and counting as passed.
#define ZRT_REQUIRE_RANKS(n)                                                                \
  do {                                                                                      \
    if (::zrt::test::worldSize() < (n)) {                                                   \
      FAIL("this test case needs at least " #n " ranks and the world has "                  \
           << ::zrt::test::worldSize()                                                      \
           << ": register its program only for rank counts >= " #n                          \
              " (zrt_add_mpi_test RANKS in cmake/ZrtTesting.cmake)");                       \
    }                                                                                       \
  } while (0)

}  // namespace zrt::test
