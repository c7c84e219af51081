// doctest's implementation, compiled once for every test program's main (test_main.cpp,
// cuda_test_main.cpp, mpi_test_main.cpp): each of the three compiled it on its own before, about
// 8 s of CPU apiece at -O2 in every build tree.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
