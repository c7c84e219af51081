#include "comm/mpi/shm/shm_team.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "comm/mpi_check.h"
#include "core/error.h"
#include "core/log.h"

namespace zrt::comm {
namespace {

// MPI places segments of a shared window only 8-byte aligned; every process maps the window at
// a page boundary, so rounding each segment up to 64 bytes lands on the same bytes everywhere.
constexpr unsigned kYields = 64;

char* align64(char* p) {
  return reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(p) + 63) & ~std::uintptr_t{63});
}

}  // namespace

ShmTeam::ShmTeam(MPI_Comm world, std::size_t stagingBytes, int simulatedRanksPerNode) {
  int worldRank = 0, worldSize = 1;
  ZRT_CHECK_MPI(MPI_Comm_rank(world, &worldRank));
  ZRT_CHECK_MPI(MPI_Comm_size(world, &worldSize));

  MPI_Comm sharedRaw = MPI_COMM_NULL;
  ZRT_CHECK_MPI(
      MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, worldRank, MPI_INFO_NULL, &sharedRaw));
  MpiCommHandle shared(sharedRaw);
  if (simulatedRanksPerNode > 0) {
    nodeComm_ = MpiCommHandle::split(shared.get(), worldRank / simulatedRanksPerNode, worldRank);
  } else {
    ZRT_CHECK_MPI(MPI_Comm_set_errhandler(shared.get(), MPI_ERRORS_RETURN));
    nodeComm_ = std::move(shared);
  }
  ZRT_CHECK_MPI(MPI_Comm_rank(nodeComm_.get(), &localRank_));
  ZRT_CHECK_MPI(MPI_Comm_size(nodeComm_.get(), &localSize_));

  leaderComm_ = MpiCommHandle::split(world, localRank_ == 0 ? 0 : MPI_UNDEFINED, worldRank);
  if (leaderComm_) ZRT_CHECK_MPI(MPI_Comm_rank(leaderComm_.get(), &nodeIndex_));
  ZRT_CHECK_MPI(MPI_Bcast(&nodeIndex_, 1, MPI_INT, 0, nodeComm_.get()));

  // Who is where: (node, local rank) of every world rank.
  int mine[2] = {nodeIndex_, localRank_};
  std::vector<int> all(2 * static_cast<std::size_t>(worldSize));
  ZRT_CHECK_MPI(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, world));
  int nodes = 0;
  for (int r = 0; r < worldSize; ++r) nodes = std::max(nodes, all[2 * r] + 1);
  members_.assign(static_cast<std::size_t>(nodes), {});
  for (int r = 0; r < worldSize; ++r) {
    auto& m = members_[static_cast<std::size_t>(all[2 * r])];
    const auto local = static_cast<std::size_t>(all[2 * r + 1]);
    if (m.size() <= local) m.resize(local + 1, -1);
    m[local] = r;
  }
  for (const auto& m : members_) maxLocalSize_ = std::max(maxLocalSize_, static_cast<int>(m.size()));

  // Each half holds one 64-byte-aligned slot per local rank.
  halfBytes_ = std::max<std::size_t>(stagingBytes / 2, 64 * static_cast<std::size_t>(localSize_));
  halfBytes_ = halfBytes_ / 64 * 64;
  const auto segmentBytes = static_cast<MPI_Aint>(64 + kControlBytes + 2 * halfBytes_);
  allocateShared(segmentBytes, win_);
  segments_.resize(static_cast<std::size_t>(localSize_));
  for (int r = 0; r < localSize_; ++r) {
    MPI_Aint size = 0;
    int disp = 0;
    ZRT_CHECK_MPI(MPI_Win_shared_query(win_.get(), r, &size, &disp,
                                       &segments_[static_cast<std::size_t>(r)]));
    segments_[static_cast<std::size_t>(r)] = align64(segments_[static_cast<std::size_t>(r)]);
  }
  new (segments_[static_cast<std::size_t>(localRank_)]) Control{};
  ZRT_CHECK_MPI(MPI_Win_sync(win_.get()));
  ZRT_CHECK_MPI(MPI_Barrier(nodeComm_.get()));  // every control line initialised before use
  ZRT_CHECK_MPI(MPI_Win_sync(win_.get()));
}

void ShmTeam::allocateShared(MPI_Aint bytes, MpiWindowHandle& into) {
  MpiInfoHandle info;
  // Each rank's segment in its own pages (first touch by the owner places it near the owner).
  info.set("alloc_shared_noncontig", "true");
  char* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  ZRT_CHECK_MPI(MPI_Win_allocate_shared(bytes, 1, info.get(), nodeComm_.get(), &base, &win));
  into.adopt(win);
}

void ShmTeam::barrier(std::chrono::steady_clock::time_point deadline, const char* what) {
  const std::uint64_t target = ++epoch_;
  control(localRank_).epoch.store(target, std::memory_order_release);
  for (int r = 0; r < localSize_; ++r) {
    if (r == localRank_) continue;
    std::atomic<std::uint64_t>& peer = control(r).epoch;
    // Waits for local rank r to reach this barrier: a short spin (it is usually close behind),
    // then sched_yield so a rank that shares our core gets to run, then short sleeps so a
    // caller's thread computing beside this one is not starved of the core while a slower peer
    // computes.
    for (unsigned spins = 0; peer.load(std::memory_order_acquire) < target; ++spins) {
      if (spins < 256) {
        _mm_pause();
        continue;
      }
      if (spins < 256 + kYields) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
      if ((spins & 63) == 0 && std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (int q = 0; q < localSize_; ++q) {
          if (control(q).epoch.load(std::memory_order_acquire) < target)
            missing += detail::cat(missing.empty() ? "" : ", ", "local ", q, " (world ",
                                   members(nodeIndex_)[static_cast<std::size_t>(q)], ")");
        }
        ZRT_THROW(TimeoutError, what,
                  ": shared-memory barrier timed out; ranks of this node that had not arrived: ",
                  missing);
      }
    }
  }
}

// Keeps a region's window alive; destruction unregisters it and frees the window (collective).
struct ShmRegionOwner final : CommBuffer::Owner {
  std::shared_ptr<ShmTeam::Registry> registry;
  std::uint64_t id = 0;
  MpiWindowHandle win;
  ~ShmRegionOwner() override {
    std::lock_guard lock(registry->mu);
    registry->regions.erase(id);
  }
};

CommBuffer ShmTeam::allocateRegion(std::size_t bytes) {
  auto owner = std::make_unique<ShmRegionOwner>();
  owner->registry = registry_;
  allocateShared(static_cast<MPI_Aint>(bytes + 64), owner->win);
  const MPI_Win win = owner->win.get();
  Region region;
  region.bases.resize(static_cast<std::size_t>(localSize_));
  region.sizes.resize(static_cast<std::size_t>(localSize_));
  for (int r = 0; r < localSize_; ++r) {
    MPI_Aint size = 0;
    int disp = 0;
    char* peer = nullptr;
    ZRT_CHECK_MPI(MPI_Win_shared_query(win, r, &size, &disp, &peer));
    region.bases[static_cast<std::size_t>(r)] = align64(peer);
    region.sizes[static_cast<std::size_t>(r)] =
        static_cast<std::size_t>(size) - static_cast<std::size_t>(align64(peer) - peer);
  }
  char* base = region.bases[static_cast<std::size_t>(localRank_)];
  if (bytes) std::memset(base, 0, bytes);
  std::lock_guard lock(registry_->mu);
  owner->id = registry_->next++;
  registry_->regions[owner->id] = std::move(region);
  return CommBuffer(base, bytes, std::move(owner));
}

ShmLocation ShmTeam::locate(const void* p, std::size_t bytes) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(registry_->mu);
  for (const auto& [id, region] : registry_->regions) {
    const auto base = reinterpret_cast<std::uintptr_t>(region.bases[static_cast<std::size_t>(localRank_)]);
    const std::size_t size = region.sizes[static_cast<std::size_t>(localRank_)];
    if (size > 0 && addr >= base && addr + bytes <= base + size) return ShmLocation{id, addr - base};
  }
  return ShmLocation{};
}

void ShmTeam::publish(ShmLocation send, ShmLocation recv,
                      std::chrono::steady_clock::time_point deadline, const char* what) {
  slot_ ^= 1;
  Publication& mine = control(localRank_).pub[slot_];
  mine.send = send;
  mine.recv = recv;
  barrier(deadline, what);  // every rank's publication of this operation is visible
}

char* ShmTeam::address(int localRank, ShmLocation where) const {
  std::lock_guard lock(registry_->mu);
  const Region& region = registry_->regions.at(where.region);
  return region.bases[static_cast<std::size_t>(localRank)] + where.offset;
}

}  // namespace zrt::comm
