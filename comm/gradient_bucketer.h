// GradientBucketer: reduces gradients across ranks in buckets while backward is still running,
// as DeepSpeed's ZeRO does. Tensors (numbered in forward order, laid out back to back in one
// flat buffer) announce "gradient ready" in backward order; they fill flat buckets of
// reduce_bucket_size elements (comm/bucket_plan.h), and each full bucket is launched at once:
//   stages 0 and 1: an all-reduce of the bucket, in place in a flat gradient buffer that then
//                   holds every rank's averaged gradients;
//   stages 2 and 3: a reduce-scatter of the bucket into the owners' shards (core/shard.h
//                   splits the flat buffer), so each rank ends with its averaged shard only;
//                   buckets go through a ring of staging buffers (two with overlap_comm).
// overlap_comm false: each bucket is waited for where it is launched (synchronous).
// contiguous_gradients true: a gradient is copied into its bucket slot as it arrives (the caller
// may reuse its memory once gradientReady returns); false: the pointer is kept and packed at
// launch (the caller keeps the gradient alive until finishBackward).
// With a Device (options.device) the gradients and the output are that device's memory, and the
// bucketer moves and averages them only through one of its streams (comm/device_queue.h), never
// with the CPU: it works on the `cuda` device and through comm/staged_communicator.h.
// Averaging divides the reduced sums once by the world size (times the accumulation steps when
// asked), never pre-scaling inputs. Buckets launch in plan order on every rank.
// Construction is collective (bucket memory comes from Communicator::allocateBuffer).
// Memory: bucketerMemory() below says how much a bucketer holds and the constructor and the first
// accumulating pass charge exactly that to the ledger, as CommBuckets: the communicator's buffers
// in kBucketMemoryPlace, the accumulation memory on the device when there is one.
// Copies of gradients that arrive far ahead of their bucket (out of backward order) are
// transient and not charged.
// Thread-safety: one thread (the backward pass) drives a bucketer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/bucket_plan.h"
#include "comm/communicator.h"
#include "comm/device_queue.h"
#include "core/shard.h"
#include "core/config/config.h"
#include "core/memory_ledger.h"

namespace zrt::comm {

struct GradientBucketerOptions {
  int stage = 0;
  std::size_t reduceBucketSize = 500'000'000;  // elements
  bool overlapComm = false;
  bool contiguousGradients = true;
  DType dtype = DType::F32;
  int gradientAccumulationSteps = 1;
  bool averageOverAccumulation = false;  // divide by world * steps instead of world
  std::uint64_t shardAlignElements = kShardAlignElements;  // the model states' layout
  // Charged for the communicator's buffers (CommBuckets, kBucketMemoryPlace) and, without a
  // device, the accumulation memory; with one, the device charges that to its own ledger.
  MemoryLedger* ledger = nullptr;
  // Where the averaged gradients go, owned by the caller (the partition manager's gradient
  // buffer); null: the bucketer allocates its own. Stages 0/1: the flat buffer of
  // plan().totalNumel elements, all-reduced in place (a gradient already sitting at its place in
  // it is not copied); stages 2/3: the shard of shard().count elements.
  void* output = nullptr;
  // The device the gradients and `output` live on (it requires `output`); null: host memory.
  Device* device = nullptr;

  // stage, reduce_bucket_size, overlap_comm and contiguous_gradients from the config.
  static GradientBucketerOptions fromZeroConfig(const ZeroConfig& zero, DType dtype);
};

// The bytes a bucketer over `plan` holds on `rank` of `world`:
//   buffers       from construction on. Stages 0/1: the flat buffer of plan.totalNumel elements,
//                 none when the caller gives the output (the reduction is in place there).
//                 Stages 2/3: the staging ring, (overlapComm ? 2 : 1) buffers of
//                 plan.maxBucketNumel elements, plus the shard when the caller gives no output.
//   accumulation  from the first backward that accumulates (beginBackward(true)) on. Stages 0/1:
//                 the running sum, plan.totalNumel elements. Stages 2/3: one receive buffer per
//                 ring slot, as large as the largest piece of this rank's shard among the buckets
//                 staged in that slot. On the device when the bucketer has one (the sum and the
//                 adds are device work there), else host memory in kBucketMemoryPlace.
struct BucketerMemory {
  std::uint64_t buffers = 0;
  std::uint64_t accumulation = 0;
};
BucketerMemory bucketerMemory(const GradBucketPlan& plan, int stage, bool overlapComm, DType dtype,
                              bool callerOutput, int world, int rank,
                              std::uint64_t shardAlignElements = kShardAlignElements);

class GradientBucketer {
 public:
  GradientBucketer(Communicator& comm, std::span<const std::size_t> numels,
                   GradientBucketerOptions options);
  ~GradientBucketer();  // waits for buckets in flight (they reference its buffers)
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // Starts a backward pass. accumulate: add this pass's averaged gradients to the output of the
  // previous passes (gradient accumulation) instead of replacing it.
  void beginBackward(bool accumulate = false);
  // Tensor `tensor`'s gradient (numels[tensor] elements of the dtype) is ready.
  void gradientReady(std::size_t tensor, const void* grad);
  // Waits for every bucket and averages. Throws InvalidArgument naming tensors never reported.
  void finishBackward();

  // Stages 0/1: all averaged gradients (plan().totalNumel elements, tensor t at plan().offset[t]).
  // Stages 2/3: this rank's averaged shard (shard().count elements; padding stays zero).
  // Valid from finishBackward until the next beginBackward.
  const void* output() const;
  std::size_t outputCount() const;
  ShardRange shard() const { return shard_; }
  const GradBucketPlan& plan() const { return plan_; }
  float divisor() const { return divisor_; }
  // Seconds the caller spent blocked on communication in the last backward (waiting for a
  // staging buffer or in finishBackward): the communication that was not hidden.
  double exposedSeconds() const { return exposedSeconds_; }
  std::size_t bucketsLaunched() const { return nextLaunch_; }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  bool sharded() const { return options_.stage >= 2; }
  char* bucketBase(std::size_t bucket);  // where bucket's flat elements are staged
  void launchReady();
  void launch(std::size_t bucket);
  void complete(std::size_t bucket);  // waits for it and finishes its post-processing
  void claimSlot(std::size_t bucket);
  void waitAllLaunched();
  void allocateAccumulation();  // the accumulation memory of bucketerMemory(), once
  void copyIn(std::size_t tensor, char* dst, const void* grad);  // a gradient into its slot

  Communicator& comm_;
  GradientBucketerOptions options_;
  GradBucketPlan plan_;
  std::size_t es_;
  float divisor_;
  ShardRange shard_;
  std::vector<std::size_t> shardBegin_;  // every rank's shard start (padded layout)
  std::size_t shardLen_ = 0;

  // Stages 0/1: the flat gradients (all-reduced in place); accumulation target when asked.
  // Bucket memory comes from Communicator::allocateBuffer, which the backend moves fastest.
  CommBuffer flat_;
  char* flatBase_ = nullptr;  // flat_ or the caller's output
  QueueBuffer acc_;
  bool resultInAcc_ = false;
  // Stages 2/3: the averaged shard, a ring of bucket staging buffers, receive buffers for
  // accumulation, and copies of gradients that arrived before their slot was free.
  QueueBuffer shardOut_;
  char* shardBase_ = nullptr;  // shardOut_ or the caller's output
  std::vector<CommBuffer> ring_;
  std::vector<QueueBuffer> recvTemp_;
  std::vector<std::size_t> slotOwner_;
  std::vector<std::vector<char>> early_;
  LedgerCharge charge_;
  LedgerCharge accumulationCharge_;
  bool accumulationAllocated_ = false;

  // Per backward.
  bool inBackward_ = false;
  bool accumulate_ = false;
  std::vector<bool> ready_;
  std::vector<const void*> gradPtr_;
  std::vector<std::size_t> pending_;
  std::vector<Work> works_;
  std::vector<bool> done_;
  std::size_t nextLaunch_ = 0;
  double exposedSeconds_ = 0;

  // Last: destroyed first, once its stream has finished the work that uses the buffers above.
  DeviceQueue queue_;
};

}  // namespace zrt::comm
