#include "core/shard.h"

#include <algorithm>

#include "core/error.h"

namespace zrt {

std::uint64_t paddedLength(std::uint64_t numel, int worldSize, std::uint64_t alignElements) {
  ZRT_ENFORCE_GE(worldSize, 1);
  ZRT_ENFORCE_GE(alignElements, 1u);
  const std::uint64_t unit = static_cast<std::uint64_t>(worldSize) * alignElements;
  return (numel + unit - 1) / unit * unit;
}

ShardRange shardOf(std::uint64_t numel, int worldSize, int rank, std::uint64_t alignElements) {
  ZRT_ENFORCE(rank >= 0 && rank < worldSize, "rank ", rank, " outside world of ", worldSize);
  const std::uint64_t per = paddedLength(numel, worldSize, alignElements) /
                            static_cast<std::uint64_t>(worldSize);
  ShardRange r;
  r.begin = per * static_cast<std::uint64_t>(rank);
  r.count = per;
  r.valid = numel > r.begin ? std::min(per, numel - r.begin) : 0;
  return r;
}

ShardPiece pieceInShard(std::uint64_t tensorBegin, std::uint64_t tensorNumel,
                        const ShardRange& shard) {
  const std::uint64_t lo = std::max(tensorBegin, shard.begin);
  const std::uint64_t hi = std::min(tensorBegin + tensorNumel, shard.begin + shard.count);
  if (hi <= lo) return {};
  return {lo - tensorBegin, lo - shard.begin, hi - lo};
}

}  // namespace zrt
