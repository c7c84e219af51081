// ShmTeam: the ranks of one node working together through shared memory. Owns the node
// communicator (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED, optionally cut into blocks of
// consecutive ranks to simulate several nodes on one machine), the communicator of node leaders
// (local rank 0 of every node), and an MPI shared-memory window (MPI_Win_allocate_shared) with
// one segment per rank: a control block (the rank's barrier counter on its own cache line, then
// what the rank publishes about its current operation) and a staging area in two halves that
// successive rounds use in turn. Every rank holds pointers to every peer's segment.
// It also keeps the registry of shared regions (allocateRegion): user buffers placed in shared
// windows, which peers read in place; an operation publishes where its buffers lie. A region's
// CommBuffer shares the registry, so it may outlive the team (and its communicator).
// Part of the MPI backend (comm/mpi/shm/): it stands on the backend's MPI handles, and only
// MpiCommunicator drives it.
// Construction, destruction and allocateRegion are collective over the node.
// Thread-safety: operations run on one thread (the communicator's progress thread);
// allocateRegion and region destruction may run on another (the registry has a mutex).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/comm_buffer.h"
#include "comm/mpi/mpi_handles.h"

namespace zrt::comm {

// Where one rank's buffer of an operation lies: region id (0: not in a shared region) and offset.
struct ShmLocation {
  std::uint64_t region = 0;
  std::uint64_t offset = 0;
};

class ShmTeam {
 public:
  // `stagingBytes` per rank (both halves); `simulatedRanksPerNode` > 0 cuts each real node into
  // blocks of that many consecutive ranks.
  ShmTeam(MPI_Comm world, std::size_t stagingBytes, int simulatedRanksPerNode);
  ShmTeam(const ShmTeam&) = delete;
  ShmTeam& operator=(const ShmTeam&) = delete;

  int localRank() const { return localRank_; }
  int localSize() const { return localSize_; }
  int nodeIndex() const { return nodeIndex_; }
  int numNodes() const { return static_cast<int>(members_.size()); }
  int maxLocalSize() const { return maxLocalSize_; }
  bool isLeader() const { return localRank_ == 0; }
  // Leaders only (MPI_COMM_NULL elsewhere); its rank order is the node order.
  MPI_Comm leaderComm() const { return leaderComm_.get(); }
  // World ranks of node `node`, in local-rank order.
  const std::vector<int>& members(int node) const { return members_.at(static_cast<std::size_t>(node)); }

  std::size_t halfBytes() const { return halfBytes_; }
  char* staging(int localRank, int half) const {
    return segments_[static_cast<std::size_t>(localRank)] + kControlBytes +
           static_cast<std::size_t>(half) * halfBytes_;
  }
  // The half the next round uses: 0, 1, 0, ... over every round of every operation, the same
  // sequence on every rank, so a round never overwrites the half peers may still be reading.
  int nextHalf() { return static_cast<int>(round_++ & 1); }

  // Blocks until every rank of the node called barrier() as often as this one: spins briefly,
  // then yields the CPU (ranks may outnumber cores). Throws TimeoutError naming the local and
  // world ranks still missing at `deadline`; `what` names the operation.
  void barrier(std::chrono::steady_clock::time_point deadline, const char* what);

  // --- Shared regions ---------------------------------------------------------------------
  // Collective over the node: a buffer of `bytes` (this rank's size) in a new shared window.
  CommBuffer allocateRegion(std::size_t bytes);
  // Where [p, p + bytes) lies, if inside one of this rank's regions.
  ShmLocation locate(const void* p, std::size_t bytes) const;
  // Publishes this rank's send and recv locations for the next operation, then a barrier; the
  // peers' publications are then readable with peerLocation until the next operation.
  void publish(ShmLocation send, ShmLocation recv, std::chrono::steady_clock::time_point deadline,
               const char* what);
  ShmLocation peerSend(int localRank) const { return control(localRank).pub[slot_].send; }
  ShmLocation peerRecv(int localRank) const { return control(localRank).pub[slot_].recv; }
  // A peer's address of a location it published.
  char* address(int localRank, ShmLocation where) const;

 private:
  struct Publication {
    ShmLocation send, recv;
  };
  struct Control {
    alignas(64) std::atomic<std::uint64_t> epoch;
    alignas(64) Publication pub[2];  // alternate operations use alternate slots
  };
  static constexpr std::size_t kControlBytes = 192;
  static_assert(sizeof(Control) <= kControlBytes);
  Control& control(int localRank) const {
    return *reinterpret_cast<Control*>(segments_[static_cast<std::size_t>(localRank)]);
  }
  struct Region {
    std::vector<char*> bases;
    std::vector<std::size_t> sizes;
  };
  // Shared with every region's owner, which unregisters itself on destruction.
  struct Registry {
    std::mutex mu;
    std::map<std::uint64_t, Region> regions;
    std::uint64_t next = 1;  // the same sequence on every rank of the node
  };
  // A new shared window of `bytes` per rank over the node (collective), owned by `into`.
  void allocateShared(MPI_Aint bytes, MpiWindowHandle& into);
  friend struct ShmRegionOwner;

  MpiCommHandle nodeComm_;
  MpiCommHandle leaderComm_;
  MpiWindowHandle win_;  // After nodeComm_: freed before it.
  int localRank_ = 0;
  int localSize_ = 1;
  int nodeIndex_ = 0;
  int maxLocalSize_ = 1;
  std::size_t halfBytes_ = 0;
  std::vector<char*> segments_;
  std::vector<std::vector<int>> members_;
  std::uint64_t epoch_ = 0;
  std::uint64_t round_ = 0;
  int slot_ = 1;

  std::shared_ptr<Registry> registry_ = std::make_shared<Registry>();
};

}  // namespace zrt::comm
