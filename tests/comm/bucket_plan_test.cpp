// The pure bucket-assignment functions: contiguous ranges in backward order, caps respected,
// every tensor (and every element of every shard) covered exactly once; zero, one, odd and
// large sizes.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "comm/bucket_plan.h"
#include "core/shard.h"
#include "core/error.h"

using namespace zrt;
using namespace zrt::comm;

namespace {

void checkGradPlan(const std::vector<std::size_t>& numels, std::size_t cap) {
  CAPTURE(cap);
  const GradBucketPlan p = planGradientBuckets(numels, cap);
  CHECK(p.totalNumel == std::accumulate(numels.begin(), numels.end(), std::size_t{0}));
  std::size_t end = p.totalNumel;  // buckets walk down from the end of the buffer
  std::vector<int> seen(numels.size(), 0);
  std::size_t expectNext = numels.size();
  for (std::size_t b = 0; b < p.buckets.size(); ++b) {
    const GradBucket& g = p.buckets[b];
    CHECK(g.end == end);
    CHECK(g.begin <= g.end);
    CHECK((g.numel() <= cap || g.tensors.size() == 1));
    CHECK(!g.tensors.empty());
    std::size_t sum = 0;
    for (std::size_t t : g.tensors) {
      CHECK(t == --expectNext);  // backward order, no gaps
      CHECK(p.bucketOf[t] == b);
      ++seen[t];
      sum += numels[t];
    }
    CHECK(sum == g.numel());
    CHECK(g.numel() <= p.maxBucketNumel);
    end = g.begin;
  }
  CHECK(end == 0);
  for (int s : seen) CHECK(s == 1);
  // Greedy: a bucket closes only when the next tensor would not fit.
  for (std::size_t b = 0; b + 1 < p.buckets.size(); ++b) {
    const std::size_t next = p.buckets[b + 1].tensors.front();
    CHECK(p.buckets[b].numel() + numels[next] > cap);
  }
}

}  // namespace

TEST_CASE("gradient buckets: contiguous, in backward order, within the cap") {
  checkGradPlan({}, 4);
  checkGradPlan({0}, 4);
  checkGradPlan({5}, 4);  // larger than a bucket: alone
  checkGradPlan({1, 2, 3, 4, 5, 6, 7}, 7);
  checkGradPlan({3, 0, 0, 4, 0, 9, 1, 1, 1, 100, 2}, 8);
  checkGradPlan({1, 1, 1, 1}, 1);
  std::vector<std::size_t> many;
  for (std::size_t i = 0; i < 300; ++i) many.push_back((i * 37) % 101);
  for (std::size_t cap : {1u, 50u, 101u, 1000u, 1000000u}) checkGradPlan(many, cap);
  CHECK_THROWS_AS(planGradientBuckets(many, 0), InvalidArgument);
  const GradBucketPlan one = planGradientBuckets(many, 1u << 30);
  CHECK(one.buckets.size() == 1);
}

TEST_CASE("all-gather buckets cover every shard element once, within the cap") {
  for (int world : {1, 2, 3, 4}) {
    for (std::size_t cap : {1u, 6u, 64u, 1000u, 100000u}) {
      for (std::uint64_t align : {1u, 8u}) {
        CAPTURE(world);
        CAPTURE(cap);
        CAPTURE(align);
        const std::vector<std::size_t> items = {0, 1, 17, 1000, 3, 0, 257};
        const GatherPlan p = planAllGatherBuckets(items, world, cap, align);
        std::vector<std::vector<int>> covered(items.size());
        for (std::size_t i = 0; i < items.size(); ++i) {
          CHECK(p.shardCount[i] == shardOf(items[i], world, 0, align).count);
          covered[i].assign(p.shardCount[i], 0);
        }
        const std::size_t perRankCap = std::max<std::size_t>(1, cap / static_cast<std::size_t>(world));
        for (const GatherBucket& b : p.buckets) {
          std::size_t sum = 0;
          for (const GatherPiece& piece : b.pieces) {
            CHECK(piece.length > 0);
            for (std::size_t e = 0; e < piece.length; ++e) ++covered[piece.item][piece.shardOffset + e];
            sum += piece.length;
          }
          CHECK(sum == b.perRank);
          CHECK(b.perRank <= perRankCap);
        }
        for (const auto& c : covered)
          for (int x : c) CHECK(x == 1);
      }
    }
  }
  CHECK_THROWS_AS(planAllGatherBuckets(std::vector<std::size_t>{4}, 0, 100), InvalidArgument);
}

TEST_CASE("all-gather plan with one item per bucket (stage 3 without prefetch)") {
  const std::vector<std::size_t> items = {0, 1, 17, 1000, 0, 257};
  for (int world : {1, 3}) {
    const GatherPlan p = planAllGatherBuckets(items, world, kOneItemPerBucket, 8);
    CHECK(p.buckets.size() == 4);  // the empty items need none
    std::size_t k = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i] == 0) continue;
      const GatherBucket& b = p.buckets.at(k++);
      REQUIRE(b.pieces.size() == 1);
      CHECK(b.pieces[0].item == i);
      CHECK(b.pieces[0].shardOffset == 0);
      CHECK(b.pieces[0].length == shardOf(items[i], world, 0, 8).count);
      CHECK(b.perRank == b.pieces[0].length);
    }
  }
}
