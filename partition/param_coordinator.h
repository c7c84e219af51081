// The stage-3 parameter coordinator: each rank keeps 1/N of every parameter (its shard of the
// flat buffers) and the coordinator gathers a module's parameters whole just before it runs and
// frees them after, as DeepSpeed's PartitionedParameterCoordinator does.
//
// - fetch(m) returns once module m's parameters are whole on the device; release(m) says the
//   caller is done reading them for now. A module's parameters are one contiguous range of the
//   trainable (and of the frozen) flat buffer, so a module travels as one all-gather with
//   per-rank pieces (core/shard.h's gatherPieces(): each rank's part of the range may differ in size).
// - Persistence is decided per module: a module with fewer than persistenceThreshold elements
//   stays whole on every rank, refreshed once per step in refresh(). (DeepSpeed decides per
//   parameter; here a large module's small biases travel in the module's one collective anyway,
//   costing no extra latency, so only whole small modules gain from staying.)
// - Gathered copies live in a pool of device slots charged to MemTag::GatheredParameters, reused
//   from fetch to fetch (on CUDA an allocation per gather would synchronise the device). Resident
//   and in-flight gathered elements never exceed maxLiveParameters. A slot dropped to make room
//   for another size goes back to the coordinator's caching allocator (core/caching_allocator.h),
//   not to the device; and when the first pass has recorded the trace, the blocks the prefetching
//   passes will need beyond the pool are reserved into that cache (warmCache), so after the
//   first step the cycle makes no raw device allocation. Slots are host-ordered (every gather
//   into one is waited for before it is freed).
// - Trace: the first pass (one micro-step's forward and backward) records the order of
//   fetches; later passes post the gathers of the coming modules, up to prefetchBucketSize
//   elements ahead, as soon as the module before them is fetched, on the communicator given
//   (a lane of its own, so gathers never queue behind gradient reductions). A released module
//   whose next use in the trace is within maxReuseDistance elements is kept, not fetched again.
//   A fetch that does not follow the trace is served on demand and the pass is recorded again,
//   so a changed order costs speed, never correctness.
// - Divergence: while a pass is recorded, every fetch first agrees with the other ranks on which
//   module comes next (a small all-gather), and endPass() compares the recorded traces; when
//   ranks differ, every rank throws an error naming the fetch, the module each rank asked for,
//   instead of hanging in mismatched all-gathers. (A divergence that appears later, on some
//   ranks only, while the others follow their recorded trace, ends in the collectives' timeout
//   or an MPI error naming the operation.)
// - offload_param nvme: a shard given as a ParamShardStore is read (its NVMe part) into pinned
//   staging buffers (stagingBuffers of them) before the module's gather is posted, and the read
//   reaches further back than the gathers: along the trace, every free staging buffer holds the
//   read of a coming module, so by the time its gather is posted the bytes are in memory. A
//   buffer is free again once its gather is done. A read that fails does not stop the gather
//   (the peers would wait in it): the failure is kept for takeIoFailure(), which the engine
//   agrees on at the end of the micro-step.
// Thread-safety: one thread (the training loop) drives a coordinator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/work.h"
#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shard.h"
#include "offload/io_request.h"
#include "partition/param_store.h"

namespace zrt {

// One module's parameters: a range of the trainable and a range of the frozen flat buffer.
struct CoordinatedModule {
  std::string name;
  std::uint64_t trainableBegin = 0, trainableCount = 0;
  std::uint64_t frozenBegin = 0, frozenCount = 0;
  std::uint64_t elements() const { return trainableCount + frozenCount; }
};

struct CoordinatorOptions {
  std::uint64_t persistenceThreshold = 100'000;  // stage3_param_persistence_threshold
  std::uint64_t maxLiveParameters = 1'000'000'000;  // stage3_max_live_parameters
  std::uint64_t maxReuseDistance = 1'000'000'000;   // stage3_max_reuse_distance
  std::uint64_t prefetchBucketSize = 50'000'000;    // stage3_prefetch_bucket_size; 0: none
  DType dtype = DType::F32;
  int stagingBuffers = 5;                           // offload_param.buffer_count
  std::uint64_t stagingBufferElements = 100'000'000;  // offload_param.buffer_size
};

// One flat buffer's shard, this rank's: in memory, or (offload_param nvme) in a store.
struct ShardSource {
  const void* memory = nullptr;
  std::uint64_t count = 0;
  ParamShardStore* store = nullptr;
};

// Per pass (or since the last takeCounts()): gathers the caller waited for because nothing had
// posted them (on demand), gathers posted ahead by the trace, fetches served by a kept copy.
struct FetchCounts {
  std::int64_t onDemand = 0;
  std::int64_t prefetched = 0;
  std::int64_t reused = 0;
  double waitedSeconds = 0;  // time fetch() blocked on gathers
  // offload_param nvme: modules whose NVMe reads were started before their gather was due, and
  // the time spent waiting for reads.
  std::int64_t readAhead = 0;
  double readWaitSeconds = 0;
};

class ParamCoordinator {
 public:
  // `trainable`/`frozen`: this rank's shards (shard elements each, as FlatLayout says); they
  // must outlive the coordinator. Collective (gathers the persistent modules).
  ParamCoordinator(Device& device, comm::Communicator& lane, std::vector<CoordinatedModule> modules,
                   ShardSource trainable, ShardSource frozen, CoordinatorOptions options);
  ~ParamCoordinator();  // waits (bounded) for gathers in flight
  ParamCoordinator(const ParamCoordinator&) = delete;
  ParamCoordinator& operator=(const ParamCoordinator&) = delete;

  struct Gathered {
    const char* trainable = nullptr;  // trainableCount elements
    const char* frozen = nullptr;     // frozenCount elements
  };
  // Module m's parameters, whole. Collective in order: every rank fetches the same modules in
  // the same order.
  Gathered fetch(std::size_t m);
  void release(std::size_t m);

  // A pass is one micro-step: its fetches are compared with (or recorded as) the trace.
  void beginPass();
  // Ends the pass; collective: when it was recorded, ranks compare their traces and all throw
  // when they differ. Throws when a module fetched in the pass is still not released.
  void endPass();
  // Modules fetched in this pass and not released (the caller's mistake), or empty.
  std::string unreleased() const;
  // The shards changed (an optimizer step): drops every gathered copy, waiting for gathers in
  // flight, and gathers the persistent modules again. Collective.
  void refresh();

  FetchCounts takeCounts();
  // The first NVMe read that failed since the last call (naming file and offset), or empty.
  std::string takeIoFailure() { return std::exchange(ioFailure_, {}); }
  bool persistent(std::size_t m) const { return modules_.at(m).persistent; }
  // Elements of the pool's slots now and at most (the live bound the ledger can show).
  std::uint64_t poolElements() const { return poolElements_; }
  CachingAllocator::Stats cacheStats() const { return cache_.stats(); }
  bool tracing() const { return !traceValid_; }

 private:
  struct Module {
    CoordinatedModule spec;
    bool persistent = false;
    int slot = -1;        // pool slot holding the gathered copy, -1 when not resident
    std::vector<comm::Work> pending;  // the gathers filling it
    int inUse = 0;        // fetches not yet released
    bool prefetched = false;  // posted ahead by the trace and not yet fetched
    // offload_param nvme: this rank's pieces (gatherPieces) and where they are staged.
    GatherPieces trainablePieces, frozenPieces;
    bool needsBuffer = false;  // a piece reaches the NVMe part of its shard
    bool staged = false;       // reads started (or the pieces are in memory)
    bool stagedPosted = false;  // the gathers reading the staged bytes were posted
    int staging = -1;           // staging buffer, -1 when none
    std::uint64_t postedAt = 0;  // order of posting, to free the oldest staging buffer first
    const char* stagedTrainable = nullptr;
    const char* stagedFrozen = nullptr;
    std::vector<offload::IoHandle> reads;
  };
  struct Staging {
    DeviceMemory memory;
    bool busy = false;
  };
  struct Slot {
    CachedMemory memory;
    std::uint64_t elements = 0;
    bool busy = false;
  };

  static constexpr std::size_t kNow = SIZE_MAX;  // a fetch: any unused copy may go
  int acquireSlot(std::uint64_t elements, std::size_t neededAt);
  void freeSlot(Module& mod);
  bool evictOne(std::size_t neededAt);
  void post(std::size_t m);
  void agreeOnFetch(std::size_t m);
  void prefetchFrom(std::size_t position);
  void waitPending(Module& mod);
  void forget(std::size_t m);
  std::uint64_t liveElements() const;
  bool stage(std::size_t m, bool mayWait);
  bool reclaimStaging(std::size_t except);
  void waitReads(Module& mod);
  void dropStaging(Module& mod);
  void readAhead(std::size_t from);
  void warmCache();
  std::optional<std::uint64_t> reuseDistance(std::size_t m) const;

  Device& device_;
  CachingAllocator cache_;  // declared before the slots, so it outlives them
  comm::Communicator& lane_;
  std::vector<Module> modules_;
  const char* trainableShard_;
  const char* frozenShard_;
  std::uint64_t trainableShardCount_, frozenShardCount_;
  ParamShardStore* trainableStore_;
  ParamShardStore* frozenStore_;
  std::vector<Staging> staging_;
  std::size_t frozenStagingAt_ = 0;  // where a module's frozen piece starts in its buffer
  std::uint64_t posts_ = 0;
  std::string ioFailure_;
  CoordinatorOptions options_;
  std::size_t es_;
  int world_, rank_;
  std::vector<Slot> slots_;
  std::uint64_t poolElements_ = 0;
  DeviceMemory persistentMemory_;  // every persistent module whole, back to back
  std::vector<std::uint64_t> persistentOffset_;

  std::vector<std::size_t> trace_;     // module order of one pass
  std::vector<std::size_t> recording_;  // this pass's fetches
  bool traceValid_ = false;
  bool following_ = false;  // this pass has matched the trace so far
  std::size_t position_ = 0;
  std::size_t prefetchedUpTo_ = 0;  // trace positions below this have been posted or skipped
  FetchCounts counts_;
};

}  // namespace zrt
