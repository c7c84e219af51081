#include <doctest/doctest.h>

#include <cstdint>

#include "core/shard.h"
#include "core/error.h"

using namespace zrt;

TEST_CASE("shards tile the padded buffer exactly, for zero, one, odd and large sizes") {
  for (std::uint64_t numel : {0ull, 1ull, 3ull, 7ull, 100ull, 10007ull, (1ull << 33) + 5}) {
    for (int world : {1, 2, 3, 4, 7, 64}) {
      for (std::uint64_t align : {1ull, 16ull}) {
        CAPTURE(numel);
        CAPTURE(world);
        CAPTURE(align);
        const std::uint64_t padded = paddedLength(numel, world, align);
        CHECK(padded >= numel);
        CHECK(padded % (static_cast<std::uint64_t>(world) * align) == 0);
        CHECK(padded - numel < static_cast<std::uint64_t>(world) * align);
        std::uint64_t next = 0, valid = 0;
        for (int r = 0; r < world; ++r) {
          ShardRange s = shardOf(numel, world, r, align);
          CHECK(s.begin == next);
          CHECK(s.count == padded / world);
          CHECK(s.valid <= s.count);
          next += s.count;
          valid += s.valid;
        }
        CHECK(next == padded);
        CHECK(valid == numel);
      }
    }
  }
}

TEST_CASE("bad shard arguments are errors") {
  CHECK_THROWS_AS(shardOf(10, 4, 4), Error);
  CHECK_THROWS_AS(shardOf(10, 4, -1), Error);
  CHECK_THROWS_AS(paddedLength(10, 0), Error);
}
