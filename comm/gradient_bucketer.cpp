#include "comm/gradient_bucketer.h"

#include <algorithm>
#include <chrono>

#include "core/element_arithmetic.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timing.h"

namespace zrt::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Stages 2/3: per ring slot, the largest piece of `shard` among the buckets staged in it (what
// an accumulating pass receives there before adding it to the shard).
std::vector<std::size_t> receiveElements(const GradBucketPlan& plan, std::size_t slots, const ShardRange& shard) {
  std::vector<std::size_t> most(slots, 0);
  for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
    const std::size_t lo = std::max<std::size_t>(plan.buckets[b].begin, shard.begin);
    const std::size_t hi = std::min<std::size_t>(plan.buckets[b].end, shard.begin + shard.count);
    if (hi > lo) most[b % slots] = std::max(most[b % slots], hi - lo);
  }
  return most;
}

std::size_t ringSlots(bool overlapComm) { return overlapComm ? 2 : 1; }

}  // namespace

BucketerMemory bucketerMemory(const GradBucketPlan& plan, int stage, bool overlapComm, DType dtype,
                              bool callerOutput, int world, int rank, std::uint64_t shardAlignElements) {
  BucketerMemory m;
  const std::uint64_t es = dtypeSize(dtype);
  if (stage < 2) {
    if (!callerOutput) m.buffers = plan.totalNumel * es;
    m.accumulation = plan.totalNumel * es;
    return m;
  }
  const ShardRange shard = shardOf(plan.totalNumel, world, rank, shardAlignElements);
  const std::size_t slots = ringSlots(overlapComm);
  m.buffers = slots * plan.maxBucketNumel * es + (callerOutput ? 0 : shard.count * es);
  for (std::size_t n : receiveElements(plan, slots, shard)) m.accumulation += n * es;
  return m;
}

GradientBucketerOptions GradientBucketerOptions::fromZeroConfig(const ZeroConfig& zero, DType dtype) {
  GradientBucketerOptions o;
  o.stage = zero.stage;
  o.reduceBucketSize = static_cast<std::size_t>(std::max<std::int64_t>(1, zero.reduce_bucket_size));
  o.overlapComm = zero.overlap_comm;
  o.contiguousGradients = zero.contiguous_gradients;
  o.dtype = dtype;
  return o;
}

GradientBucketer::GradientBucketer(Communicator& comm, std::span<const std::size_t> numels,
                                   GradientBucketerOptions options)
    : comm_(comm),
      options_(options),
      plan_(planGradientBuckets(numels, options.reduceBucketSize)),
      es_(dtypeSize(options.dtype)),
      queue_(options.device) {
  if (options_.device && !options_.output)
    ZRT_THROW(InvalidArgument, "gradient bucketer: a bucketer on ", options_.device->name(),
              " needs the caller's output buffer on that device");
  if (options_.stage < 0 || options_.stage > 3)
    ZRT_THROW(InvalidArgument, "ZeRO stage must be 0, 1, 2 or 3, got ", options_.stage);
  if (options_.gradientAccumulationSteps < 1)
    ZRT_THROW(InvalidArgument, "gradient_accumulation_steps must be at least 1, got ",
              options_.gradientAccumulationSteps);
  divisor_ = static_cast<float>(comm.size()) *
             (options_.averageOverAccumulation ? static_cast<float>(options_.gradientAccumulationSteps) : 1.f);
  const int world = comm.size();
  shard_ = shardOf(plan_.totalNumel, world, comm.rank(), options_.shardAlignElements);
  shardLen_ = shard_.count;
  for (int r = 0; r < world; ++r)
    shardBegin_.push_back(shardOf(plan_.totalNumel, world, r, options_.shardAlignElements).begin);

  std::uint64_t bytes = 0;
  if (!sharded()) {
    if (options_.output) {
      flatBase_ = static_cast<char*>(options_.output);
    } else {
      flat_ = comm.allocateBuffer(plan_.totalNumel * es_);
      flatBase_ = flat_.as<char>();
      bytes = flat_.bytes();
    }
  } else {
    const std::size_t slots = ringSlots(options_.overlapComm);
    if (options_.output) {
      shardBase_ = static_cast<char*>(options_.output);
    } else {
      shardOut_ = queue_.allocate(shardLen_ * es_);
      shardBase_ = shardOut_.data();
      bytes = shardOut_.bytes();
    }
    for (std::size_t i = 0; i < slots; ++i) ring_.push_back(comm.allocateBuffer(plan_.maxBucketNumel * es_));
    recvTemp_.resize(slots);
    slotOwner_.assign(slots, kNone);
    bytes += slots * plan_.maxBucketNumel * es_;
  }
  ZRT_ENFORCE_EQ(bytes, bucketerMemory(plan_, options_.stage, options_.overlapComm, options_.dtype,
                                       options_.output != nullptr, world, comm.rank(),
                                       options_.shardAlignElements).buffers);
  // Device memory from a device backend is charged by the device.
  if (options_.ledger && comm.bufferPlace() == MemPlace::Host)
    charge_ = LedgerCharge(*options_.ledger, MemTag::CommBuckets, kBucketMemoryPlace, bytes);
  const std::size_t n = plan_.numel.size(), nb = plan_.buckets.size();
  ready_.assign(n, false);
  gradPtr_.assign(n, nullptr);
  early_.resize(n);
  pending_.assign(nb, 0);
  works_.resize(nb);
  done_.assign(nb, true);
  nextLaunch_ = nb;
}

GradientBucketer::~GradientBucketer() {
  try {
    waitAllLaunched();
    queue_.fence();
  } catch (const std::exception& e) {
    logError(detail::cat("gradient bucketer: a bucket failed while shutting down: ", e.what()));
  }
}

void GradientBucketer::allocateAccumulation() {
  if (accumulationAllocated_) return;
  accumulationAllocated_ = true;
  std::uint64_t bytes = 0;
  if (!sharded()) {
    acc_ = queue_.allocate(plan_.totalNumel * es_);
    bytes = acc_.bytes();
  } else {
    const std::vector<std::size_t> most = receiveElements(plan_, ring_.size(), shard_);
    for (std::size_t s = 0; s < ring_.size(); ++s) {
      recvTemp_[s] = queue_.allocate(most[s] * es_);
      bytes += recvTemp_[s].bytes();
    }
  }
  // Device memory is charged by the device itself, on the device.
  if (options_.ledger && !queue_.device())
    accumulationCharge_ = LedgerCharge(*options_.ledger, MemTag::CommBuckets, kBucketMemoryPlace, bytes);
}

void GradientBucketer::beginBackward(bool accumulate) {
  if (inBackward_) ZRT_THROW(InvalidArgument, "beginBackward called twice without finishBackward");
  waitAllLaunched();
  inBackward_ = true;
  accumulate_ = accumulate;
  exposedSeconds_ = 0;
  if (accumulate) allocateAccumulation();
  if (!sharded() && accumulate && !resultInAcc_) {
    // The running sum moves out of the flat buffer, which this pass overwrites (the caller may
    // write into it as soon as this returns: hence the fence below).
    queue_.copy(acc_.data(), flatBase_, acc_.bytes());
    resultInAcc_ = true;
  }
  queue_.fence();
  if (!sharded() && !accumulate) resultInAcc_ = false;
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(gradPtr_.begin(), gradPtr_.end(), nullptr);
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
    pending_[b] = plan_.buckets[b].tensors.size();
    works_[b] = Work();
    done_[b] = false;
  }
  nextLaunch_ = 0;
  launchReady();  // buckets of zero tensors (none today) or all-empty ones go at once
}

char* GradientBucketer::bucketBase(std::size_t bucket) {
  const GradBucket& b = plan_.buckets[bucket];
  if (!sharded()) return flatBase_ + b.begin * es_;
  return ring_[bucket % ring_.size()].as<char>();
}

void GradientBucketer::claimSlot(std::size_t bucket) {
  const std::size_t s = bucket % ring_.size();
  if (slotOwner_[s] == bucket) return;
  if (slotOwner_[s] != kNone) {
    const auto t0 = Clock::now();
    complete(slotOwner_[s]);  // waits for the bucket that used this staging buffer before
    exposedSeconds_ += secondsSince(t0);
  }
  slotOwner_[s] = bucket;
}

void GradientBucketer::gradientReady(std::size_t tensor, const void* grad) {
  if (!inBackward_) ZRT_THROW(InvalidArgument, "gradientReady(", tensor, ") outside a backward pass");
  if (tensor >= ready_.size())
    ZRT_THROW(InvalidArgument, "gradientReady: tensor ", tensor, " out of range (", ready_.size(),
              " tensors)");
  if (ready_[tensor])
    ZRT_THROW(InvalidArgument, "gradientReady: tensor ", tensor, " reported twice in one backward");
  const std::size_t numel = plan_.numel[tensor];
  if (numel > 0 && grad == nullptr)
    ZRT_THROW(InvalidArgument, "gradientReady: null gradient for tensor ", tensor);
  ready_[tensor] = true;
  const std::size_t b = plan_.bucketOf[tensor];
  if (options_.contiguousGradients && numel > 0) {
    const std::size_t at = (plan_.offset[tensor] - plan_.buckets[b].begin) * es_;
    if (!sharded()) {
      copyIn(tensor, bucketBase(b) + at, grad);
    } else {
      // Its staging buffer is free, or held by the bucket K before it once that one launched
      // (buckets launch in order, so claiming never waits on a bucket that cannot launch).
      if (b < nextLaunch_ + ring_.size()) {
        claimSlot(b);
        copyIn(tensor, bucketBase(b) + at, grad);
      } else {
        // Out of order, far ahead: its staging buffer still belongs to an earlier bucket that
        // has not launched. Keep a copy until this bucket launches.
        early_[tensor].resize(numel * es_);
        copyIn(tensor, early_[tensor].data(), grad);
      }
    }
  } else {
    gradPtr_[tensor] = grad;
  }
  --pending_[b];
  launchReady();
}

// The caller may reuse the gradient's memory once gradientReady returns, so a copy through the
// device is waited for here.
void GradientBucketer::copyIn(std::size_t tensor, char* dst, const void* grad) {
  queue_.copy(dst, grad, plan_.numel[tensor] * es_);
  queue_.fence();
}

void GradientBucketer::launchReady() {
  while (nextLaunch_ < plan_.buckets.size() && pending_[nextLaunch_] == 0) launch(nextLaunch_++);
}

void GradientBucketer::launch(std::size_t bucket) {
  const GradBucket& b = plan_.buckets[bucket];
  if (sharded()) claimSlot(bucket);
  char* base = bucketBase(bucket);
  for (std::size_t t : b.tensors) {  // pack what was not copied on arrival
    const std::size_t at = (plan_.offset[t] - b.begin) * es_, bytes = plan_.numel[t] * es_;
    if (gradPtr_[t]) queue_.copy(base + at, gradPtr_[t], bytes);
    if (!early_[t].empty()) queue_.copy(base + at, early_[t].data(), bytes);
  }
  // The collective reads the bucket (and a reused receive buffer is written) only once the
  // copies and the adds queued before it are done.
  queue_.fence();
  for (std::size_t t : b.tensors) early_[t].clear();
  if (!sharded()) {
    works_[bucket] = comm_.allReduceAsync(base, b.numel(), options_.dtype);
  } else {
    // Segment r of the bucket is its overlap with rank r's shard; shards follow rank order.
    const int world = comm_.size();
    std::vector<std::size_t> counts(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      const std::size_t lo = std::max(b.begin, shardBegin_[static_cast<std::size_t>(r)]);
      const std::size_t hi = std::min(b.end, shardBegin_[static_cast<std::size_t>(r)] + shardLen_);
      counts[static_cast<std::size_t>(r)] = hi > lo ? hi - lo : 0;
    }
    const std::size_t mine = counts[static_cast<std::size_t>(comm_.rank())];
    char* recv;
    if (accumulate_) {
      auto& temp = recvTemp_[bucket % ring_.size()];
      ZRT_ENFORCE(temp.bytes() >= mine * es_, "gradient bucketer: receive buffer of ", temp.bytes(),
                  " bytes for a piece of ", mine * es_);
      recv = temp.data();
    } else {
      const std::size_t from = std::max(b.begin, shard_.begin);
      recv = shardBase_ + (mine ? (from - shard_.begin) * es_ : 0);
    }
    works_[bucket] = comm_.reduceScatterAsync(base, recv, counts, options_.dtype);
  }
  if (!options_.overlapComm) {
    const auto t0 = Clock::now();
    complete(bucket);
    exposedSeconds_ += secondsSince(t0);
  }
}

void GradientBucketer::complete(std::size_t bucket) {
  if (done_[bucket]) return;
  // Waits for the bucket's collective (bounded by the default wait timeout).
  works_[bucket].wait();
  done_[bucket] = true;
  if (!sharded()) return;
  const std::size_t s = bucket % ring_.size();
  if (accumulate_) {
    const GradBucket& b = plan_.buckets[bucket];
    const std::size_t lo = std::max(b.begin, shard_.begin);
    const std::size_t hi = std::min(b.end, shard_.begin + shardLen_);
    if (hi > lo)
      queue_.addDivided(options_.dtype, shardBase_ + (lo - shard_.begin) * es_,
                        recvTemp_[s].data(), hi - lo, divisor_);
  }
  if (slotOwner_[s] == bucket) slotOwner_[s] = kNone;
}

void GradientBucketer::waitAllLaunched() {
  completeAll(std::min(nextLaunch_, done_.size()), [&](std::size_t b) {
    try {
      complete(b);
    } catch (...) {
      // A failed bucket is not waited for again; one still running (the wait timed out) still
      // uses the bucket's buffers, so a later wait (or the destructor) waits for it again.
      if (works_[b].isCompleted()) done_[b] = true;
      throw;
    }
  });
}

void GradientBucketer::finishBackward() {
  if (!inBackward_) ZRT_THROW(InvalidArgument, "finishBackward without beginBackward");
  const auto t0 = Clock::now();
  inBackward_ = false;
  waitAllLaunched();
  exposedSeconds_ += secondsSince(t0);
  if (nextLaunch_ < plan_.buckets.size()) {
    std::string missing;
    int listed = 0;
    for (std::size_t t = 0; t < ready_.size(); ++t)
      if (!ready_[t] && listed++ < 10) missing += detail::cat(missing.empty() ? "" : ", ", t);
    ZRT_THROW(InvalidArgument, "finishBackward: ", listed, " tensor(s) never reported ready (",
              missing, listed > 10 ? ", ..." : "", "); buckets from #", nextLaunch_,
              " were not launched on this rank");
  }
  if (!sharded()) {
    if (resultInAcc_)
      queue_.addDivided(options_.dtype, acc_.data(), flatBase_, plan_.totalNumel, divisor_);
    else
      queue_.divide(options_.dtype, flatBase_, plan_.totalNumel, divisor_);
  } else if (!accumulate_) {
    queue_.divide(options_.dtype, shardBase_, shardLen_, divisor_);
  }
  queue_.fence();  // output() is read by the caller once this returns
}

const void* GradientBucketer::output() const {
  if (sharded()) return shardBase_;
  return resultInAcc_ ? acc_.data() : flatBase_;
}

std::size_t GradientBucketer::outputCount() const {
  return sharded() ? shardLen_ : plan_.totalNumel;
}

}  // namespace zrt::comm
