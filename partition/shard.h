// Shard arithmetic: which contiguous range of a flat buffer each rank owns. Pure functions over
// plain data; every stage's partitioning rule and every collective's per-rank counts use them.
#pragma once

#include <cstdint>

namespace zrt {

struct ShardRange {
  std::uint64_t begin = 0;  // First element this rank owns (in the padded buffer).
  std::uint64_t count = 0;  // Elements this rank owns, padding included.
  std::uint64_t valid = 0;  // Of those, elements that hold real data (the rest is padding).
};

// The padded length of a flat buffer of `numel` elements split evenly over `worldSize` ranks:
// the next multiple of worldSize * alignElements (alignElements >= 1, e.g. to keep each shard
// 64-byte aligned). Equal shards are what reduce_scatter and all_gather want.
std::uint64_t paddedLength(std::uint64_t numel, int worldSize, std::uint64_t alignElements = 1);

// The range `rank` owns of a buffer of `numel` real elements padded to paddedLength().
ShardRange shardOf(std::uint64_t numel, int worldSize, int rank, std::uint64_t alignElements = 1);

}  // namespace zrt
