// The CUDA kernel's launch planning (a pure host function, tested without a GPU): every chunk
// of every non-empty tensor is covered exactly once, and no launch exceeds the kernel's limits.
#include "runtime/optim/cuda/launch_plan.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

using namespace zrt::optim::cuda;

namespace {

void checkPlan(const std::vector<std::int64_t>& counts, int maxTensors, int maxBlocks,
               std::int64_t chunk) {
  const auto plan = planLaunches(counts.data(), counts.size(), maxTensors, maxBlocks, chunk);
  std::map<std::pair<std::size_t, std::int64_t>, int> seen;
  for (const PlannedLaunch& l : plan) {
    REQUIRE(!l.blocks.empty());
    REQUIRE(l.tensors.size() <= static_cast<std::size_t>(maxTensors));
    REQUIRE(l.blocks.size() <= static_cast<std::size_t>(maxBlocks));
    for (const PlannedBlock& b : l.blocks) {
      REQUIRE(b.slot >= 0);
      REQUIRE(static_cast<std::size_t>(b.slot) < l.tensors.size());
      const std::size_t t = l.tensors[static_cast<std::size_t>(b.slot)];
      REQUIRE(b.chunk * chunk < counts[t]);
      ++seen[{t, b.chunk}];
    }
  }
  std::size_t expected = 0;
  for (std::size_t t = 0; t < counts.size(); ++t) {
    const std::int64_t chunks = (counts[t] + chunk - 1) / chunk;
    expected += static_cast<std::size_t>(chunks);
    for (std::int64_t c = 0; c < chunks; ++c) {
      INFO("tensor " << t << " chunk " << c);
      CHECK(seen[{t, c}] == 1);
    }
  }
  CHECK(seen.size() == expected);
}

}  // namespace

TEST_CASE("launch plans cover every chunk once within the limits") {
  checkPlan({}, kMaxTensors, kMaxBlocks, kChunk);
  checkPlan({0, 0}, kMaxTensors, kMaxBlocks, kChunk);
  checkPlan({1}, kMaxTensors, kMaxBlocks, kChunk);
  // The CUDA test's layout: 38 small tensors, an empty one, one over 320 blocks.
  std::vector<std::int64_t> counts;
  for (int i = 0; i < 38; ++i) counts.push_back(1 + 977 * i);
  counts.push_back(0);
  counts.push_back(5'300'001);
  checkPlan(counts, kMaxTensors, kMaxBlocks, kChunk);
  // Small limits make every boundary case common.
  for (int maxT : {1, 2, 3}) {
    for (int maxB : {1, 2, 5}) {
      checkPlan({7, 1, 0, 12, 3, 3, 20, 1}, maxT, maxB, 2);
      checkPlan({9, 9, 9}, maxT, maxB, 3);
    }
  }
}

TEST_CASE("a tensor that spills over continues in slot 0 of the next launch") {
  const std::vector<std::int64_t> counts{10, 25};
  const auto plan = planLaunches(counts.data(), counts.size(), 4, 3, 5);
  REQUIRE(plan.size() == 3);  // blocks: t0c0 t0c1 t1c0 | t1c1 t1c2 t1c3 | t1c4
  CHECK(plan[1].tensors == std::vector<std::size_t>{1});
  CHECK(plan[1].blocks[0].slot == 0);
  CHECK(plan[1].blocks[0].chunk == 1);
  CHECK(plan[2].blocks.size() == 1);
  CHECK(plan[2].blocks[0].chunk == 4);
}
