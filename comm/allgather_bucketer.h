// AllGatherBucketer: rebuilds full buffers from the shards the ranks own, in buckets of
// allgather_bucket_size elements (counted over all ranks), as DeepSpeed gathers updated
// parameters after the optimizer step (stages 1 and 2: one flat buffer, cut into pieces) and
// fetches parameters ahead of use (stage 3: many parameters, small ones coalesced into one
// bucket). Items are partitioned by core/shard.h. A bucket of one piece is one all-gather
// straight into the full buffer (per-rank displacements, in place when the shard lies inside
// it); a bucket of several pieces packs them, gathers once, and unpacks when waited for.
// With overlap_comm every bucket is posted at start() and waitBucket(k) returns as soon as
// bucket k is in place (use the parameters it holds while later buckets travel); without it,
// start() runs the buckets one after another.
// With a Device (options.device) the shards and full buffers are that device's memory, packed and
// unpacked only through one of its streams (comm/device_queue.h). The pack buffers of
// multi-piece buckets are communicator buffers allocated once, at construction (collective), and
// reused by every round; bucketPackBytes() says how many bytes they are.
// Thread-safety: one thread drives a bucketer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/bucket_plan.h"
#include "comm/communicator.h"
#include "comm/device_queue.h"
#include "core/config/config.h"
#include "core/memory_ledger.h"
#include "core/shard.h"

namespace zrt::comm {

struct AllGatherBucketerOptions {
  // Elements over all ranks; kOneItemPerBucket (0): every item gathered whole on its own.
  std::size_t allgatherBucketSize = 500'000'000;
  bool overlapComm = false;
  DType dtype = DType::F32;
  std::uint64_t shardAlignElements = kShardAlignElements;  // the model states' layout
  Device* device = nullptr;       // where shards and full buffers live; null: host memory
  MemoryLedger* ledger = nullptr;  // charged for the pack buffers (CommBuckets, kBucketMemoryPlace)

  // Stages 1/2: allgather_bucket_size; stage 3: stage3_prefetch_bucket_size, where 0 (no
  // prefetch) gathers each parameter on its own.
  static AllGatherBucketerOptions fromZeroConfig(const ZeroConfig& zero, DType dtype);
};

// The pack buffers a bucketer over `plan` holds on each rank: for every bucket of several pieces,
// its send buffer (perRank elements) and its receive buffer (perRank · world elements).
std::uint64_t bucketPackBytes(const GatherPlan& plan, DType dtype);

class AllGatherBucketer {
 public:
  AllGatherBucketer(Communicator& comm, std::span<const std::size_t> itemNumels,
                    AllGatherBucketerOptions options);
  ~AllGatherBucketer();  // waits for buckets in flight
  AllGatherBucketer(const AllGatherBucketer&) = delete;
  AllGatherBucketer& operator=(const AllGatherBucketer&) = delete;

  const GatherPlan& plan() const { return plan_; }
  // shards[i]: this rank's shard of item i (plan().shardCount[i] elements); fulls[i]: the
  // gathered item (shardCount[i] * world elements, padding included).
  void start(std::span<const void* const> shards, std::span<void* const> fulls);
  // Blocks until bucket k is in place (rethrows its failure).
  void waitBucket(std::size_t k);
  // The bucket after which item i is complete.
  std::size_t lastBucketOf(std::size_t item) const { return lastBucket_.at(item); }
  void finish();

 private:
  void post(std::size_t k);

  Communicator& comm_;
  AllGatherBucketerOptions options_;
  GatherPlan plan_;
  std::size_t es_;
  std::vector<std::size_t> lastBucket_;
  std::vector<const void*> shards_;
  std::vector<void*> fulls_;
  std::vector<Work> works_;
  std::vector<bool> done_;
  std::vector<CommBuffer> send_, recv_;  // packed buckets (empty for one-piece buckets)
  LedgerCharge charge_;
  // Last: destroyed first, once its stream has finished the work that uses the buffers above.
  DeviceQueue queue_;
};

}  // namespace zrt::comm
