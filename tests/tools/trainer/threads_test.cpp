// Each rank's share of the node's cores (tools/trainer/threads.h).
#include <doctest/doctest.h>

#include "threads.h"

TEST_CASE("each rank takes cores / ranks on the node, at least one thread") {
  using zrt::trainer::shareOfCores;
  CHECK(shareOfCores(2, 1) == 2);
  CHECK(shareOfCores(2, 2) == 1);
  CHECK(shareOfCores(16, 3) == 5);
  CHECK(shareOfCores(2, 4) == 1);
  CHECK(shareOfCores(1, 0) == 1);
}
