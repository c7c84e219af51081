// Every rank computes its own shard; together they must tile the buffer with no gap or overlap.
#include <doctest/doctest.h>
#include <mpi.h>

#include <vector>

#include "core/shard.h"
#include "tests/support/mpi_test.h"

using namespace zrt;

TEST_CASE("ranks agree on a tiling of the buffer") {
  const int world = test::worldSize();
  for (std::uint64_t numel : {0ull, 1ull, 5ull, 1001ull}) {
    ShardRange mine = shardOf(numel, world, test::worldRank());
    std::uint64_t local[3] = {mine.begin, mine.count, mine.valid};
    std::vector<std::uint64_t> all(3 * world);
    MPI_Allgather(local, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, test::testComm());
    std::uint64_t next = 0, valid = 0;
    for (int r = 0; r < world; ++r) {
      CHECK(all[3 * r] == next);
      next += all[3 * r + 1];
      valid += all[3 * r + 2];
    }
    CHECK(next == paddedLength(numel, world));
    CHECK(valid == numel);
  }
}
