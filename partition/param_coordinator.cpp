#include "partition/param_coordinator.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdint>
#include <utility>

#include "core/error.h"
#include "core/timing.h"

namespace zrt {

ParamCoordinator::ParamCoordinator(Device& device, comm::Communicator& lane,
                                   std::vector<CoordinatedModule> modules, ShardSource trainable,
                                   ShardSource frozen, CoordinatorOptions options)
    : device_(device),
      cache_(device),
      lane_(lane),
      trainableShard_(static_cast<const char*>(trainable.memory)),
      frozenShard_(static_cast<const char*>(frozen.memory)),
      trainableShardCount_(trainable.count),
      frozenShardCount_(frozen.count),
      trainableStore_(trainable.store),
      frozenStore_(frozen.store),
      options_(options),
      es_(dtypeSize(options.dtype)),
      world_(lane.size()),
      rank_(lane.rank()) {
  std::uint64_t persistentElements = 0;
  std::size_t trainableStaging = 0, frozenStaging = 0;
  for (CoordinatedModule& spec : modules) {
    Module mod;
    mod.persistent = spec.elements() < options_.persistenceThreshold;
    if (!mod.persistent && spec.elements() > options_.maxLiveParameters)
      ZRT_THROW(InvalidArgument, "stage 3: module '", spec.name, "' has ", spec.elements(),
                " parameter elements, more than stage3_max_live_parameters (",
                options_.maxLiveParameters, "); raise it or split the module");
    persistentOffset_.push_back(persistentElements);
    if (mod.persistent) persistentElements += spec.elements();
    mod.trainablePieces = gatherPieces(spec.trainableBegin, spec.trainableCount, trainableShardCount_, world_, rank_);
    mod.frozenPieces = gatherPieces(spec.frozenBegin, spec.frozenCount, frozenShardCount_, world_, rank_);
    // Does this rank's piece of a range reach the store's NVMe part?
    auto onNvme = [&](const ParamShardStore* store, const GatherPieces& g) {
      const std::uint64_t n = g.counts[static_cast<std::size_t>(rank_)];
      return store && n > 0 && g.sendOffset + n > store->inCpu();
    };
    const std::uint64_t tn = mod.trainablePieces.counts[static_cast<std::size_t>(rank_)];
    const std::uint64_t fn = mod.frozenPieces.counts[static_cast<std::size_t>(rank_)];
    mod.needsBuffer = onNvme(trainableStore_, mod.trainablePieces) || onNvme(frozenStore_, mod.frozenPieces);
    if (mod.needsBuffer) {
      if (tn + fn > options_.stagingBufferElements)
        ZRT_THROW(InvalidArgument, "stage 3: module '", spec.name, "' puts ", tn + fn,
                  " parameter elements of this rank's shard through an NVMe staging buffer of ",
                  options_.stagingBufferElements,
                  " elements; raise zero_optimization.offload_param.buffer_size or split the module");
      if (trainableStore_) trainableStaging = std::max(trainableStaging, trainableStore_->stagingBytes(tn));
      if (frozenStore_) frozenStaging = std::max(frozenStaging, frozenStore_->stagingBytes(fn));
    }
    mod.spec = std::move(spec);
    modules_.push_back(std::move(mod));
  }
  if (trainableStaging + frozenStaging > 0) {
    // Sized for the largest piece this rank stages, not buffer_size: pinned memory is scarce.
    frozenStagingAt_ = (trainableStaging + 4095) / 4096 * 4096;
    const std::size_t bytes = frozenStagingAt_ + frozenStaging;
    const int count = std::max(1, options_.stagingBuffers);
    for (int i = 0; i < count; ++i) staging_.push_back({device_.allocatePinned(bytes, MemTag::SwapBuffers), false});
  }
  if (persistentElements)
    persistentMemory_ = device_.allocate(persistentElements * es_, MemTag::GatheredParameters);
  refresh();
}

ParamCoordinator::~ParamCoordinator() {
  for (Module& mod : modules_) {
    try {
      waitPending(mod);
    } catch (...) {
      // A failed gather already reached the caller or is moot while unwinding; the slots go.
    }
    waitReads(mod);  // no read may land in a staging buffer after it is freed
  }
}

void ParamCoordinator::waitPending(Module& mod) {
  if (!mod.pending.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<comm::Work> works = std::move(mod.pending);
    mod.pending.clear();
    for (const comm::Work& w : works) w.wait();
    counts_.waitedSeconds += secondsSince(t0);
  }
  if (mod.stagedPosted) dropStaging(mod);  // the gathers have read the staged bytes
}

// Waits for the module's NVMe reads; a failure is kept (the first one), not thrown, so the
// gathers the peers expect are still posted.
void ParamCoordinator::waitReads(Module& mod) {
  if (mod.reads.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (const offload::IoHandle& h : mod.reads) {
    try {
      h.wait();
    } catch (const std::exception& e) {
      if (ioFailure_.empty()) ioFailure_ = "stage 3: reading module '" + mod.spec.name + "' from NVMe: " + e.what();
    }
  }
  mod.reads.clear();
  counts_.readWaitSeconds += secondsSince(t0);
}

void ParamCoordinator::dropStaging(Module& mod) {
  waitReads(mod);
  if (mod.staging >= 0) staging_[static_cast<std::size_t>(mod.staging)].busy = false;
  mod.staging = -1;
  mod.staged = false;
  mod.stagedPosted = false;
  mod.stagedTrainable = mod.stagedFrozen = nullptr;
}

// Starts module m's NVMe reads (its pieces in memory need none) into a free staging buffer.
// Without one: false, or with `mayWait` a buffer is freed first (reclaimStaging).
bool ParamCoordinator::stage(std::size_t m, bool mayWait) {
  Module& mod = modules_[m];
  if (mod.staged || (!trainableStore_ && !frozenStore_)) return true;
  char* buffer = nullptr;
  if (mod.needsBuffer) {
    for (;;) {
      auto it = std::find_if(staging_.begin(), staging_.end(), [](const Staging& s) { return !s.busy; });
      if (it != staging_.end()) {
        it->busy = true;
        mod.staging = static_cast<int>(it - staging_.begin());
        buffer = static_cast<char*>(it->memory.data());
        break;
      }
      if (!mayWait) return false;
      ZRT_ENFORCE(reclaimStaging(m), "stage 3: no NVMe staging buffer can be freed for module '",
                  mod.spec.name, "'");
    }
  }
  auto read = [&](ParamShardStore* store, const char* memory, const GatherPieces& g, char* at) -> const char* {
    const std::uint64_t n = g.counts[static_cast<std::size_t>(rank_)];
    if (!store) return memory + g.sendOffset * es_;
    static const char kNothing = 0;  // a gather's send buffer when this rank sends nothing
    if (n == 0) return &kNothing;
    ParamShardStore::Staged s = store->read(g.sendOffset, n, at);
    for (offload::IoHandle& h : s.reads) mod.reads.push_back(std::move(h));
    return s.data;
  };
  mod.stagedTrainable = read(trainableStore_, trainableShard_, mod.trainablePieces, buffer);
  mod.stagedFrozen = read(frozenStore_, frozenShard_, mod.frozenPieces, buffer ? buffer + frozenStagingAt_ : nullptr);
  mod.staged = true;
  if (!mayWait) ++counts_.readAhead;  // started ahead, not by the fetch that needs it now
  return true;
}

// Frees a staging buffer other than module `except`'s: the one whose gathers were posted first
// (waiting for them), else the read-ahead needed last by the trace.
bool ParamCoordinator::reclaimStaging(std::size_t except) {
  Module* oldest = nullptr;
  for (Module& mod : modules_)
    if (mod.staging >= 0 && mod.stagedPosted && (!oldest || mod.postedAt < oldest->postedAt)) oldest = &mod;
  if (oldest) {
    waitPending(*oldest);
    return true;
  }
  int victim = -1;
  std::size_t victimNext = 0;
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    if (m == except || modules_[m].staging < 0) continue;
    std::size_t next = SIZE_MAX;
    for (std::size_t i = position_; traceValid_ && i < trace_.size(); ++i)
      if (trace_[i] == m) {
        next = i;
        break;
      }
    if (victim < 0 || next > victimNext) {
      victim = static_cast<int>(m);
      victimNext = next;
    }
  }
  if (victim < 0) return false;
  dropStaging(modules_[static_cast<std::size_t>(victim)]);
  return true;
}

// Starts the NVMe reads of the trace's coming modules, from position `from`, into the staging
// buffers that are free.
void ParamCoordinator::readAhead(std::size_t from) {
  if (staging_.empty() || !traceValid_ || !following_) return;
  for (std::size_t i = from; i < trace_.size(); ++i) {
    Module& mod = modules_[trace_[i]];
    if (mod.persistent || mod.slot >= 0 || mod.staged) continue;
    if (!stage(trace_[i], /*mayWait=*/false)) break;
  }
}

// Posts module m's gathers into `out` (its trainable range, then its frozen range).
void ParamCoordinator::post(std::size_t m) {
  Module& mod = modules_[m];
  char* out = mod.persistent ? static_cast<char*>(persistentMemory_.data()) + persistentOffset_[m] * es_
                             : static_cast<char*>(slots_[static_cast<std::size_t>(mod.slot)].memory.data());
  const CoordinatedModule& s = mod.spec;
  if (trainableStore_ || frozenStore_) {
    stage(m, /*mayWait=*/true);
    waitReads(mod);
    mod.stagedPosted = true;
    mod.postedAt = ++posts_;
  } else {
    mod.stagedTrainable = trainableShard_ ? trainableShard_ + mod.trainablePieces.sendOffset * es_ : nullptr;
    mod.stagedFrozen = frozenShard_ ? frozenShard_ + mod.frozenPieces.sendOffset * es_ : nullptr;
  }
  auto gather = [&](const char* piece, const GatherPieces& g, std::uint64_t count, char* dst) {
    if (count == 0) return;
    mod.pending.push_back(lane_.allGatherAsync(piece, dst, g.counts, options_.dtype, g.displs));
  };
  gather(mod.stagedTrainable, mod.trainablePieces, s.trainableCount, out);
  gather(mod.stagedFrozen, mod.frozenPieces, s.frozenCount, out + s.trainableCount * es_);
}

std::uint64_t ParamCoordinator::liveElements() const {
  std::uint64_t n = 0;
  for (const Slot& s : slots_)
    if (s.busy) n += s.elements;
  return n;
}

// A slot of at least `elements`: a free one that fits, else a new one while the pool stays
// within maxLiveParameters (dropping free slots that do not fit to make room), else by evicting
// a gathered copy nobody uses whose next use in the trace comes after position `neededAt`
// (kNow: any). -1 when nothing may be evicted for a prefetch; an error for a fetch.
int ParamCoordinator::acquireSlot(std::uint64_t elements, std::size_t neededAt) {
  for (;;) {
    int best = -1;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (!s.busy && s.elements >= elements &&
          (best < 0 || s.elements < slots_[static_cast<std::size_t>(best)].elements))
        best = static_cast<int>(i);
    }
    if (best >= 0) {
      slots_[static_cast<std::size_t>(best)].busy = true;
      return best;
    }
    if (poolElements_ + elements <= options_.maxLiveParameters) {
      auto empty = std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.elements == 0; });
      if (empty == slots_.end()) empty = slots_.insert(slots_.end(), Slot{});
      empty->memory = cache_.allocate(elements * es_, MemTag::GatheredParameters);
      empty->elements = elements;
      empty->busy = true;
      poolElements_ += elements;
      return static_cast<int>(empty - slots_.begin());
    }
    auto freeSlot = std::max_element(slots_.begin(), slots_.end(), [](const Slot& a, const Slot& b) {
      return (a.busy ? 0 : a.elements) < (b.busy ? 0 : b.elements);
    });
    if (freeSlot != slots_.end() && !freeSlot->busy && freeSlot->elements > 0) {
      poolElements_ -= freeSlot->elements;
      freeSlot->memory.reset();
      freeSlot->elements = 0;
      continue;
    }
    if (!evictOne(neededAt)) {
      if (neededAt != kNow) return -1;
      std::string inUse;
      for (const Module& mod : modules_)
        if (mod.inUse > 0 && !mod.persistent) inUse += (inUse.empty() ? "'" : ", '") + mod.spec.name + "'";
      ZRT_THROW(InvalidArgument, "stage 3: no room to gather ", elements,
                " elements within stage3_max_live_parameters (", options_.maxLiveParameters,
                "); in use: ", inUse.empty() ? std::string("none") : inUse);
    }
  }
}

void ParamCoordinator::freeSlot(Module& mod) {
  waitPending(mod);
  slots_[static_cast<std::size_t>(mod.slot)].busy = false;
  mod.slot = -1;
  mod.prefetched = false;
}

// Drops module m's gathered copy; a later trace position that counted on it is posted again.
void ParamCoordinator::forget(std::size_t m) {
  freeSlot(modules_[m]);
  if (!traceValid_) return;
  for (std::size_t i = position_; i < prefetchedUpTo_ && i < trace_.size(); ++i)
    if (trace_[i] == m) {
      prefetchedUpTo_ = i;
      break;
    }
}

// Evicts the unused gathered copy needed last (or never again) by the trace, if that is after
// position `neededAt`.
bool ParamCoordinator::evictOne(std::size_t neededAt) {
  int victim = -1;
  std::size_t victimNext = 0;
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    const Module& mod = modules_[m];
    if (mod.slot < 0 || mod.inUse > 0) continue;
    std::size_t next = SIZE_MAX;
    if (traceValid_)
      for (std::size_t i = position_; i < trace_.size(); ++i)
        if (trace_[i] == m) {
          next = i;
          break;
        }
    if (victim < 0 || next > victimNext) {
      victim = static_cast<int>(m);
      victimNext = next;
    }
  }
  if (victim < 0 || (neededAt != kNow && victimNext <= neededAt)) return false;
  forget(static_cast<std::size_t>(victim));
  return true;
}

// Posts the gathers of the trace's modules from `from` on, up to prefetchBucketSize elements
// ahead (the next module always), while the pool has room or holds a copy needed later.
void ParamCoordinator::prefetchFrom(std::size_t from) {
  if (!traceValid_ || !following_ || options_.prefetchBucketSize == 0) return;
  // NVMe reads of the whole window start first, so they run together; each post below then
  // waits only for its own. (Posting stays in trace order whatever the reads do: every rank
  // must post the same gathers in the same order.)
  std::uint64_t window = 0;
  for (std::size_t i = std::max(from, prefetchedUpTo_); !staging_.empty() && i < trace_.size(); ++i) {
    Module& mod = modules_[trace_[i]];
    if (mod.persistent) continue;
    window += mod.spec.elements();
    if (i > from && window > options_.prefetchBucketSize) break;
    if (mod.slot >= 0 || mod.staged) continue;
    if (!stage(trace_[i], /*mayWait=*/false)) break;
  }
  std::uint64_t ahead = 0;
  for (std::size_t i = from; i < trace_.size(); ++i) {
    Module& mod = modules_[trace_[i]];
    if (mod.persistent) continue;
    ahead += mod.spec.elements();
    if (i > from && ahead > options_.prefetchBucketSize) break;
    if (i < prefetchedUpTo_ || mod.slot >= 0) continue;
    const int slot = acquireSlot(mod.spec.elements(), i);
    if (slot < 0) break;
    mod.slot = slot;
    mod.prefetched = true;
    post(trace_[i]);
    prefetchedUpTo_ = i + 1;
  }
}

// Every rank says which module it fetches next; all throw, naming each rank's module, when
// they differ, before any rank posts a gather the others would not match.
void ParamCoordinator::agreeOnFetch(std::size_t m) {
  const std::uint32_t mine[2] = {static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(recording_.size() - 1)};
  // Pre-filled with this rank's answer, so a backend that moves nothing (comm/null) agrees.
  std::vector<std::uint32_t> all(2 * static_cast<std::size_t>(world_));
  for (int r = 0; r < world_; ++r) std::copy(mine, mine + 2, all.begin() + 2 * r);
  const auto t0 = std::chrono::steady_clock::now();
  lane_.allGather(mine, all.data(), 2, DType::F32);
  counts_.waitedSeconds += secondsSince(t0);
  bool same = true;
  for (int r = 0; r < world_; ++r) same = same && all[2 * static_cast<std::size_t>(r)] == mine[0];
  if (same) return;
  std::string who;
  for (int r = 0; r < world_; ++r) {
    const std::uint32_t id = all[2 * static_cast<std::size_t>(r)];
    who += "\n  rank " + std::to_string(r) + ": '" +
           (id < modules_.size() ? modules_[id].spec.name : std::string("?")) + "'";
  }
  ZRT_THROW(InvalidArgument, "stage 3: ranks fetch different modules at fetch #", mine[1],
            " of this micro-step (every rank must run the same modules in the same order):", who);
}

ParamCoordinator::Gathered ParamCoordinator::fetch(std::size_t m) {
  if (m >= modules_.size()) ZRT_THROW(InvalidArgument, "stage 3: module ", m, " does not exist");
  Module& mod = modules_[m];
  ++mod.inUse;
  if (mod.persistent) {
    const char* base = static_cast<const char*>(persistentMemory_.data()) + persistentOffset_[m] * es_;
    return {base, base + mod.spec.trainableCount * es_};
  }
  recording_.push_back(m);
  const bool onTrace = following_ && position_ < trace_.size() && trace_[position_] == m;
  if (!onTrace) {
    following_ = false;
    agreeOnFetch(m);
  }
  if (mod.slot < 0) {
    mod.slot = acquireSlot(mod.spec.elements(), kNow);
    post(m);
    ++counts_.onDemand;
  } else if (mod.prefetched) {
    mod.prefetched = false;
    ++counts_.prefetched;
  } else {
    ++counts_.reused;
  }
  ++position_;
  if (onTrace) prefetchFrom(position_);
  readAhead(std::max(position_, prefetchedUpTo_));
  waitPending(mod);
  const char* base = static_cast<const char*>(slots_[static_cast<std::size_t>(mod.slot)].memory.data());
  return {base, base + mod.spec.trainableCount * es_};
}

// Elements fetched from the trace's current position until module m's next use; none when the
// trace does not use it again.
std::optional<std::uint64_t> ParamCoordinator::reuseDistance(std::size_t m) const {
  std::uint64_t between = 0;
  for (std::size_t i = position_; i < trace_.size(); ++i) {
    if (trace_[i] == m) return between;
    const Module& other = modules_[trace_[i]];
    if (!other.persistent) between += other.spec.elements();
  }
  return std::nullopt;
}

void ParamCoordinator::release(std::size_t m) {
  if (m >= modules_.size()) ZRT_THROW(InvalidArgument, "stage 3: module ", m, " does not exist");
  Module& mod = modules_[m];
  if (mod.inUse == 0)
    ZRT_THROW(InvalidArgument, "stage 3: module '", mod.spec.name, "' released without a fetch");
  if (--mod.inUse > 0 || mod.persistent) return;
  if (following_) {
    const std::optional<std::uint64_t> d = reuseDistance(m);
    if (d && *d <= options_.maxReuseDistance) return;  // kept for its next use
  }
  forget(m);
}

void ParamCoordinator::beginPass() {
  position_ = 0;
  prefetchedUpTo_ = 0;
  recording_.clear();
  following_ = traceValid_;
  prefetchFrom(0);
  readAhead(prefetchedUpTo_);
}

std::string ParamCoordinator::unreleased() const {
  std::string names;
  for (const Module& mod : modules_)
    if (mod.inUse > 0) names += (names.empty() ? "'" : ", '") + mod.spec.name + "'";
  return names.empty() ? names : "modules fetched and never released: " + names;
}

void ParamCoordinator::endPass() {
  const bool recorded = !following_ || position_ != trace_.size();
  if (recorded) {
    // Ranks agreed fetch by fetch; a rank that stopped fetching early shows here.
    const std::uint64_t mine = recording_.size();
    std::vector<std::uint64_t> all(static_cast<std::size_t>(world_), mine);
    lane_.allGather(&mine, all.data(), 2, DType::F32);
    if (std::any_of(all.begin(), all.end(), [&](std::uint64_t n) { return n != mine; })) {
      std::string who;
      for (int r = 0; r < world_; ++r) {
        const std::uint64_t n = all[static_cast<std::size_t>(r)];
        who += "\n  rank " + std::to_string(r) + ": " + std::to_string(n) + " fetches";
      }
      ZRT_THROW(InvalidArgument, "stage 3: ranks fetched different numbers of modules in this "
                "micro-step (every rank must run the same modules in the same order):", who);
    }
    trace_ = recording_;
    traceValid_ = true;
    warmCache();
  }
  following_ = false;
}

// The pass that records the trace fetches on demand, one module at a time; the passes that
// follow it prefetch along the trace and keep modules for reuse, so more copies are live at once
// and the pool grows. Reserving those blocks now, in the recording pass, keeps raw allocations
// (a cudaMalloc each, synchronising the GPU) out of every later step. The live set is estimated
// at each trace position as prefetchFrom() and release() would leave it: the prefetch window
// ahead, plus the modules kept for a reuse within maxReuseDistance; the largest, within
// maxLiveParameters, is what the free slots and the warmed blocks must cover.
void ParamCoordinator::warmCache() {
  std::vector<std::uint64_t> most;
  std::uint64_t mostElements = 0;
  for (std::size_t i = 0; i < trace_.size(); ++i) {
    std::vector<bool> live(modules_.size(), false);
    std::uint64_t ahead = 0;
    for (std::size_t k = i; k < trace_.size(); ++k) {
      const Module& mod = modules_[trace_[k]];
      if (mod.persistent) continue;
      ahead += mod.spec.elements();
      if (k > i && (options_.prefetchBucketSize == 0 || ahead > options_.prefetchBucketSize)) break;
      live[trace_[k]] = true;
    }
    for (std::size_t j = 0; j < i; ++j) {
      const std::size_t m = trace_[j];
      if (modules_[m].persistent || live[m]) continue;
      std::uint64_t between = 0;
      for (std::size_t k = j + 1; k < trace_.size(); ++k) {
        if (trace_[k] == m) {
          if (k >= i && between <= options_.maxReuseDistance) live[m] = true;
          break;
        }
        if (!modules_[trace_[k]].persistent) between += modules_[trace_[k]].spec.elements();
      }
    }
    std::vector<std::uint64_t> sizes;
    std::uint64_t elements = 0;
    for (std::size_t m = 0; m < modules_.size(); ++m)
      if (live[m]) {
        sizes.push_back(modules_[m].spec.elements());
        elements += sizes.back();
      }
    if (elements > mostElements) {
      mostElements = elements;
      most = std::move(sizes);
    }
  }
  std::sort(most.begin(), most.end(), std::greater<>());
  std::vector<bool> matched(slots_.size(), false);
  std::vector<std::size_t> blocks;
  std::uint64_t total = poolElements_;
  for (const std::uint64_t elements : most) {
    // A free slot that fits serves it, as acquireSlot() would take it.
    int best = -1;
    for (std::size_t s = 0; s < slots_.size(); ++s)
      if (!matched[s] && !slots_[s].busy && slots_[s].elements >= elements &&
          (best < 0 || slots_[s].elements < slots_[static_cast<std::size_t>(best)].elements))
        best = static_cast<int>(s);
    if (best >= 0) {
      matched[static_cast<std::size_t>(best)] = true;
      continue;
    }
    if (total + elements > options_.maxLiveParameters) break;
    total += elements;
    blocks.push_back(elements * es_);
  }
  // Reserved, not in use: the ledger's gathered-parameter figures are those of the slots alone.
  cache_.warm(std::move(blocks), MemTag::GatheredParameters);
}

void ParamCoordinator::refresh() {
  // The step's refresh is not the caller's fetches.
  const double waited = counts_.waitedSeconds, readWaited = counts_.readWaitSeconds;
  for (Module& mod : modules_) {
    mod.inUse = 0;
    if (mod.slot >= 0) freeSlot(mod);
    waitPending(mod);
    dropStaging(mod);  // read before the shards changed
  }
  for (std::size_t m = 0; m < modules_.size(); ++m)
    if (modules_[m].persistent) post(m);
  for (Module& mod : modules_) waitPending(mod);
  counts_.waitedSeconds = waited;
  counts_.readWaitSeconds = readWaited;
}

FetchCounts ParamCoordinator::takeCounts() { return std::exchange(counts_, {}); }

}  // namespace zrt
