// ShmTeam: the ranks of one node working together through shared memory. Owns the node
// communicator (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED, optionally cut into blocks of
// consecutive ranks to simulate several nodes on one machine), the communicator of node leaders
// (local rank 0 of every node), and an MPI shared-memory window (MPI_Win_allocate_shared) with
// one segment per rank: a control line holding the rank's barrier counter, then a staging area
// in two halves that successive rounds use in turn. Every rank holds pointers to every peer's
// segment, so a rank reads and writes its peers' staging directly.
// Construction and destruction are collective over the world communicator.
// Thread-safety: one thread (the communicator's progress thread) uses a team at a time.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/mpi/mpi_handles.h"

namespace zrt::comm {

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

 private:
  static constexpr std::size_t kControlBytes = 128;
  std::atomic<std::uint64_t>& epochOf(int localRank) const {
    return *reinterpret_cast<std::atomic<std::uint64_t>*>(segments_[static_cast<std::size_t>(localRank)]);
  }

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
};

}  // namespace zrt::comm
