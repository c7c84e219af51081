// Bucket plans as plain data, computed by pure functions (as c10d's bucket assignment), so they
// can be tested alone and are identical on every rank.
//
// Gradient buckets: tensors are laid out back to back in index order in one flat buffer, and
// their gradients become ready in backward order (the reverse). Consecutive ready tensors fill a
// bucket while it stays within `bucketElems` elements; a tensor larger than that gets a bucket
// of its own. Every bucket is therefore one contiguous range of the flat buffer, and buckets are
// launched in plan order (descending offsets) on every rank.
//
// All-gather buckets: items (a flat buffer, or in stage 3 each parameter) are partitioned over
// the ranks by core/shard.h. A bucket gathers pieces — the same range of every rank's shard
// of an item — totalling at most `bucketElems` elements over all ranks; a large item is cut into
// several pieces, small items share a bucket.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace zrt::comm {

struct GradBucket {
  std::size_t begin = 0;             // flat range [begin, end), elements
  std::size_t end = 0;
  std::vector<std::size_t> tensors;  // in ready (backward) order
  std::size_t numel() const { return end - begin; }
};

struct GradBucketPlan {
  std::vector<std::size_t> offset;    // flat offset of each tensor
  std::vector<std::size_t> numel;     // each tensor's elements
  std::vector<std::size_t> bucketOf;  // bucket of each tensor
  std::vector<GradBucket> buckets;    // launch order
  std::size_t totalNumel = 0;
  std::size_t maxBucketNumel = 0;
};

// Throws InvalidArgument when bucketElems is 0.
GradBucketPlan planGradientBuckets(std::span<const std::size_t> numels, std::size_t bucketElems);

struct GatherPiece {
  std::size_t item = 0;
  std::size_t shardOffset = 0;  // range of every rank's shard of the item
  std::size_t length = 0;       // elements per rank
};

struct GatherBucket {
  std::vector<GatherPiece> pieces;
  std::size_t perRank = 0;  // sum of piece lengths
};

struct GatherPlan {
  int worldSize = 1;
  std::vector<std::size_t> itemNumel;   // real elements of each item
  std::vector<std::size_t> shardCount;  // per-rank shard length of each item (padding included)
  std::vector<GatherBucket> buckets;
};

// Items' shards follow shardOf(numel, worldSize, rank, alignElements). Zero-sized items need no
// bucket. bucketElems == kOneItemPerBucket (0) gathers every item whole in a bucket of its own
// (stage 3 with stage3_prefetch_bucket_size 0: nothing fetched ahead, nothing coalesced).
// Throws InvalidArgument when worldSize < 1.
inline constexpr std::size_t kOneItemPerBucket = 0;
GatherPlan planAllGatherBuckets(std::span<const std::size_t> itemNumels, int worldSize,
                                std::size_t bucketElems, std::uint64_t alignElements = 1);

}  // namespace zrt::comm
