#include "partition/param_coordinator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "core/error.h"
#include "core/timing.h"

namespace zrt {

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

ParamCoordinator::ParamCoordinator(Device& device, comm::Communicator& lane,
                                   std::vector<CoordinatedModule> modules, const void* trainableShard,
                                   std::uint64_t trainableShardCount, const void* frozenShard,
                                   std::uint64_t frozenShardCount, CoordinatorOptions options)
    : device_(device),
      lane_(lane),
      trainableShard_(static_cast<const char*>(trainableShard)),
      frozenShard_(static_cast<const char*>(frozenShard)),
      trainableShardCount_(trainableShardCount),
      frozenShardCount_(frozenShardCount),
      options_(options),
      es_(dtypeSize(options.dtype)),
      world_(lane.size()),
      rank_(lane.rank()) {
  std::uint64_t persistentElements = 0;
  for (CoordinatedModule& spec : modules) {
    Module mod;
    mod.persistent = spec.elements() < options_.persistenceThreshold;
    if (!mod.persistent && spec.elements() > options_.maxLiveParameters)
      ZRT_THROW(InvalidArgument, "stage 3: module '", spec.name, "' has ", spec.elements(),
                " parameter elements, more than stage3_max_live_parameters (",
                options_.maxLiveParameters, "); raise it or split the module");
    persistentOffset_.push_back(persistentElements);
    if (mod.persistent) persistentElements += spec.elements();
    mod.spec = std::move(spec);
    modules_.push_back(std::move(mod));
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
  }
}

void ParamCoordinator::waitPending(Module& mod) {
  if (mod.pending.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<comm::Work> works = std::move(mod.pending);
  mod.pending.clear();
  for (const comm::Work& w : works) w.wait();
  counts_.waitedSeconds += secondsSince(t0);
}

// Posts module m's gathers into `out` (its trainable range, then its frozen range).
void ParamCoordinator::post(std::size_t m) {
  Module& mod = modules_[m];
  char* out = mod.persistent ? static_cast<char*>(persistentMemory_.data()) + persistentOffset_[m] * es_
                             : static_cast<char*>(slots_[static_cast<std::size_t>(mod.slot)].memory.data());
  const CoordinatedModule& s = mod.spec;
  auto gather = [&](const char* shard, std::uint64_t shardCount, std::uint64_t begin,
                    std::uint64_t count, char* dst) {
    if (count == 0) return;
    const GatherPieces g = gatherPieces(begin, count, shardCount, world_, rank_);
    mod.pending.push_back(lane_.allGatherAsync(shard + g.sendOffset * es_, dst, g.counts,
                                               options_.dtype, g.displs));
  };
  gather(trainableShard_, trainableShardCount_, s.trainableBegin, s.trainableCount, out);
  gather(frozenShard_, frozenShardCount_, s.frozenBegin, s.frozenCount, out + s.trainableCount * es_);
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
      empty->memory = device_.allocate(elements * es_, MemTag::GatheredParameters);
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
  }
  following_ = false;
}

void ParamCoordinator::refresh() {
  const double waited = counts_.waitedSeconds;  // the step's refresh is not the caller's fetches
  for (Module& mod : modules_) {
    mod.inUse = 0;
    if (mod.slot >= 0) freeSlot(mod);
    waitPending(mod);
  }
  for (std::size_t m = 0; m < modules_.size(); ++m)
    if (modules_[m].persistent) post(m);
  for (Module& mod : modules_) waitPending(mod);
  counts_.waitedSeconds = waited;
}

FetchCounts ParamCoordinator::takeCounts() { return std::exchange(counts_, {}); }

}  // namespace zrt
