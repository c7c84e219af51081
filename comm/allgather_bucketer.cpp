#include "comm/allgather_bucketer.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace zrt::comm {

AllGatherBucketerOptions AllGatherBucketerOptions::fromZeroConfig(const ZeroConfig& zero,
                                                                  DType dtype) {
  AllGatherBucketerOptions o;
  // The config admits stage3_prefetch_bucket_size 0 (no prefetch); it used to become a bucket
  // of one element, an all-gather per element.
  const std::int64_t size = zero.stage >= 3 ? zero.stage3_prefetch_bucket_size : zero.allgather_bucket_size;
  o.allgatherBucketSize =
      size <= 0 ? kOneItemPerBucket : static_cast<std::size_t>(size);
  o.overlapComm = zero.overlap_comm;
  o.dtype = dtype;
  return o;
}

std::uint64_t bucketPackBytes(const GatherPlan& plan, DType dtype) {
  std::uint64_t elements = 0;
  for (const GatherBucket& b : plan.buckets)
    if (b.pieces.size() > 1) elements += b.perRank * (1 + static_cast<std::uint64_t>(plan.worldSize));
  return elements * dtypeSize(dtype);
}

AllGatherBucketer::AllGatherBucketer(Communicator& comm, std::span<const std::size_t> itemNumels,
                                     AllGatherBucketerOptions options)
    : comm_(comm),
      options_(options),
      plan_(planAllGatherBuckets(itemNumels, comm.size(), options.allgatherBucketSize,
                                 options.shardAlignElements)),
      es_(dtypeSize(options.dtype)),
      queue_(options.device) {
  lastBucket_.assign(itemNumels.size(), 0);
  for (std::size_t k = 0; k < plan_.buckets.size(); ++k)
    for (const GatherPiece& p : plan_.buckets[k].pieces) lastBucket_[p.item] = k;
  done_.assign(plan_.buckets.size(), true);
  works_.resize(plan_.buckets.size());
  send_.resize(plan_.buckets.size());
  recv_.resize(plan_.buckets.size());
  const auto world = static_cast<std::size_t>(comm.size());
  std::uint64_t bytes = 0;
  for (std::size_t k = 0; k < plan_.buckets.size(); ++k) {
    const GatherBucket& b = plan_.buckets[k];
    if (b.pieces.size() < 2) continue;
    send_[k] = comm.allocateBuffer(b.perRank * es_);
    recv_[k] = comm.allocateBuffer(b.perRank * world * es_);
    bytes += send_[k].bytes() + recv_[k].bytes();
  }
  ZRT_ENFORCE_EQ(bytes, bucketPackBytes(plan_, options_.dtype));
  // Device memory from a device backend is charged by the device.
  if (options_.ledger && comm.bufferPlace() == MemPlace::Host)
    charge_ = LedgerCharge(*options_.ledger, MemTag::CommBuckets, kBucketMemoryPlace, bytes);
}

AllGatherBucketer::~AllGatherBucketer() {
  try {
    finish();
    queue_.fence();
  } catch (const std::exception& e) {
    logError(detail::cat("all-gather bucketer: a bucket failed while shutting down: ", e.what()));
  }
}

void AllGatherBucketer::start(std::span<const void* const> shards, std::span<void* const> fulls) {
  const std::size_t n = plan_.itemNumel.size();
  if (shards.size() != n || fulls.size() != n)
    ZRT_THROW(InvalidArgument, "all-gather bucketer: ", shards.size(), " shards and ",
              fulls.size(), " full buffers given for ", n, " items");
  finish();  // a previous round's buckets reference the old buffers
  shards_.assign(shards.begin(), shards.end());
  fulls_.assign(fulls.begin(), fulls.end());
  std::fill(done_.begin(), done_.end(), false);
  for (std::size_t k = 0; k < plan_.buckets.size(); ++k) {
    post(k);
    if (!options_.overlapComm) waitBucket(k);
  }
}

void AllGatherBucketer::post(std::size_t k) {
  const GatherBucket& b = plan_.buckets[k];
  const int world = comm_.size();
  if (b.pieces.size() == 1) {
    const GatherPiece& p = b.pieces[0];
    std::vector<std::size_t> counts(static_cast<std::size_t>(world), p.length), displs;
    for (int r = 0; r < world; ++r)
      displs.push_back(static_cast<std::size_t>(r) * plan_.shardCount[p.item] + p.shardOffset);
    works_[k] = comm_.allGatherAsync(static_cast<const char*>(shards_[p.item]) + p.shardOffset * es_,
                                     fulls_[p.item], counts, options_.dtype, displs);
    return;
  }
  std::size_t at = 0;
  for (const GatherPiece& p : b.pieces) {
    queue_.copy(send_[k].as<char>() + at, static_cast<const char*>(shards_[p.item]) + p.shardOffset * es_,
                p.length * es_);
    at += p.length * es_;
  }
  queue_.fence();  // packed before the collective reads it
  works_[k] = comm_.allGatherAsync(send_[k].data(), recv_[k].data(), b.perRank, options_.dtype);
}

void AllGatherBucketer::waitBucket(std::size_t k) {
  if (k >= done_.size())
    ZRT_THROW(InvalidArgument, "waitBucket(", k, "): only ", done_.size(), " buckets");
  if (done_[k]) return;
  // Waits for bucket k's all-gather (bounded by the default wait timeout). A failed bucket is
  // not waited for again; one still running (the wait timed out) still writes into the
  // bucket's buffers, so a later wait (or the destructor) waits for it again.
  try {
    works_[k].wait();
  } catch (...) {
    if (works_[k].isCompleted()) done_[k] = true;
    throw;
  }
  done_[k] = true;
  const GatherBucket& b = plan_.buckets[k];
  if (b.pieces.size() == 1) return;
  const int world = comm_.size();
  for (int r = 0; r < world; ++r) {
    const char* src = recv_[k].as<char>() + static_cast<std::size_t>(r) * b.perRank * es_;
    for (const GatherPiece& p : b.pieces) {
      queue_.copy(static_cast<char*>(fulls_[p.item]) +
                      (static_cast<std::size_t>(r) * plan_.shardCount[p.item] + p.shardOffset) * es_,
                  src, p.length * es_);
      src += p.length * es_;
    }
  }
  queue_.fence();  // the caller uses the bucket's parameters once this returns
}

void AllGatherBucketer::finish() {
  completeAll(done_.size(), [&](std::size_t k) { waitBucket(k); });
}

}  // namespace zrt::comm
