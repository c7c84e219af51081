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

GatherPieces gatherPieces(std::uint64_t begin, std::uint64_t count, std::uint64_t shard, int world,
                          int rank) {
  GatherPieces g;
  g.counts.assign(static_cast<std::size_t>(world), 0);
  g.displs.assign(static_cast<std::size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    const std::uint64_t lo = std::max(begin, static_cast<std::uint64_t>(r) * shard);
    const std::uint64_t hi = std::min(begin + count, static_cast<std::uint64_t>(r + 1) * shard);
    if (hi <= lo) continue;
    g.counts[static_cast<std::size_t>(r)] = hi - lo;
    g.displs[static_cast<std::size_t>(r)] = lo - begin;
    if (r == rank) g.sendOffset = lo - static_cast<std::uint64_t>(r) * shard;
  }
  return g;
}

}  // namespace zrt
