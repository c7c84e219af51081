// meanOverRanks (tools/trainer/rank_mean.h) on ranks as threads: every rank gets the mean of
// every rank's values to double precision, far below fp32's rounding of the same sum.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "comm/threads/thread_world.h"
#include "rank_mean.h"

using namespace zrt;

TEST_CASE("the mean over ranks keeps double precision") {
  for (int world : {1, 2, 3, 4}) {
    CAPTURE(world);
    comm::ThreadWorld::run(world, [world](comm::Communicator& c) {
      // Rank r holds 5.5 + r * 1e-9 and r / 3: the 1e-9 steps are below fp32's resolution at 5.5.
      const std::vector<double> mine{5.5 + c.rank() * 1e-9, c.rank() / 3.0};
      const auto mean = trainer::meanOverRanks(c, mine);
      double want0 = 0, want1 = 0;
      for (int r = 0; r < world; ++r) {
        want0 += 5.5 + r * 1e-9;
        want1 += r / 3.0;
      }
      REQUIRE(mean.size() == 2);
      CHECK(std::abs(mean[0] - want0 / world) < 1e-13);
      CHECK(std::abs(mean[1] - want1 / world) < 1e-13);
      CHECK(trainer::meanOverRanks(c, {}).empty());
    });
  }
}
