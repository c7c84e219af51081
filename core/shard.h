// Shard arithmetic: which contiguous range of a flat buffer each rank owns, which piece of a
// tensor laid out in that buffer falls in a rank's shard, and which piece each rank sends when a
// range is gathered from every rank's shard. Pure functions over plain data; every stage's
// partitioning rule, the bucketers, the stage-3 coordinator, zrt-plan and the engine use them,
// so all agree on the layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zrt {

// Every flat model-state buffer, and every bucketer's view of one, is padded so each rank's
// shard is a multiple of 32 elements: 64 bytes of a 16-bit dtype and 128 bytes of fp32, so every
// shard of every dtype starts on a cache line and an AVX-512 vector boundary (relative to the
// buffer's start, which the allocators align to 4096). One constant, so the layouts agree.
inline constexpr std::uint64_t kShardAlignElements = 32;

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

// The part of one tensor (elements [tensorBegin, tensorBegin + tensorNumel) of a flat buffer)
// that lies in `shard`: `count` elements starting at element `inTensor` of the tensor, which sit
// at element `inShard` of the shard. count == 0 when they do not meet.
struct ShardPiece {
  std::uint64_t inTensor = 0;
  std::uint64_t inShard = 0;
  std::uint64_t count = 0;
};
ShardPiece pieceInShard(std::uint64_t tensorBegin, std::uint64_t tensorNumel, const ShardRange& shard);

// Each rank's piece of elements [begin, begin + count) of a flat buffer whose rank r owns
// [r·shard, (r+1)·shard): counts[r] elements placed at displs[r] of the gathered range, taken
// from element sendOffset of this rank's shard.
struct GatherPieces {
  std::vector<std::size_t> counts, displs;
  std::uint64_t sendOffset = 0;
};
GatherPieces gatherPieces(std::uint64_t begin, std::uint64_t count, std::uint64_t shard,
                          int world, int rank);

}  // namespace zrt
