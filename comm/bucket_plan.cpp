#include "comm/bucket_plan.h"

#include <algorithm>

#include "core/shard.h"
#include "core/error.h"

namespace zrt::comm {

GradBucketPlan planGradientBuckets(std::span<const std::size_t> numels, std::size_t bucketElems) {
  if (bucketElems == 0) ZRT_THROW(InvalidArgument, "reduce_bucket_size must be at least 1 element");
  GradBucketPlan p;
  const std::size_t n = numels.size();
  p.numel.assign(numels.begin(), numels.end());
  p.offset.resize(n);
  p.bucketOf.resize(n);
  for (std::size_t t = 0; t < n; ++t) {
    p.offset[t] = p.totalNumel;
    p.totalNumel += numels[t];
  }
  GradBucket cur;
  auto close = [&] {
    if (cur.tensors.empty()) return;
    p.maxBucketNumel = std::max(p.maxBucketNumel, cur.numel());
    p.buckets.push_back(std::move(cur));
    cur = GradBucket{};
  };
  for (std::size_t k = n; k-- > 0;) {  // backward order: last tensor first
    const std::size_t size = numels[k];
    if (!cur.tensors.empty() && cur.numel() + size > bucketElems) close();
    if (cur.tensors.empty()) cur.end = p.offset[k] + size;
    cur.begin = p.offset[k];
    cur.tensors.push_back(k);
    p.bucketOf[k] = p.buckets.size();
  }
  close();
  return p;
}

GatherPlan planAllGatherBuckets(std::span<const std::size_t> itemNumels, int worldSize,
                                std::size_t bucketElems, std::uint64_t alignElements) {
  if (worldSize < 1) ZRT_THROW(InvalidArgument, "world size must be at least 1, got ", worldSize);
  GatherPlan p;
  p.worldSize = worldSize;
  p.itemNumel.assign(itemNumels.begin(), itemNumels.end());
  const bool onePerItem = bucketElems == kOneItemPerBucket;
  // Elements per rank a bucket may hold (at least one, however small the bucket).
  const std::size_t perRankCap = std::max<std::size_t>(1, bucketElems / static_cast<std::size_t>(worldSize));
  GatherBucket cur;
  for (std::size_t i = 0; i < itemNumels.size(); ++i) {
    const std::size_t shard = shardOf(itemNumels[i], worldSize, 0, alignElements).count;
    p.shardCount.push_back(shard);
    if (onePerItem) {
      if (shard > 0) p.buckets.push_back(GatherBucket{{GatherPiece{i, 0, shard}}, shard});
      continue;
    }
    for (std::size_t off = 0; off < shard;) {
      if (cur.perRank == perRankCap) {
        p.buckets.push_back(std::move(cur));
        cur = GatherBucket{};
      }
      const std::size_t len = std::min(shard - off, perRankCap - cur.perRank);
      cur.pieces.push_back(GatherPiece{i, off, len});
      cur.perRank += len;
      off += len;
    }
  }
  if (!cur.pieces.empty()) p.buckets.push_back(std::move(cur));
  return p;
}

}  // namespace zrt::comm
