// MpiCommunicator: the host backend. Operations run on a dedicated progress thread (MPI is
// initialised with MPI_THREAD_MULTIPLE), so the caller computes while they progress. Each
// operation takes one of two paths, the same on every rank:
//   mpi  MPI's own collectives on a private duplicate of the communicator (fp16/bf16 through
//        ZRT's fp32-accumulating MPI ops);
//   shm  the shared-memory algorithms (comm/mpi/shm/): inside a node through an MPI shared window,
//        hierarchical over several nodes (MPI between node leaders).
// CommOptions::path picks one or lets size decide (auto: shm for all-reduce, reduce-scatter and
// all-gather of at least shmMinBytes when some node has several ranks). With checkConsistency
// every operation first compares kind, type and sizes across ranks (one small all-gather) and
// fails on every rank with a PeerError naming the ranks that differ. A Watchdog aborts the job
// with a report when an operation outlives the timeout, and when a peer is lost, unless
// CommOptions::raiseOnPeerLoss makes the loss a PeerError (comm/mpi/peer_loss.h).
// Construction and destruction are collective. Thread-safety: see Communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "comm/comm_options.h"
#include "comm/communicator.h"
#include "comm/mpi/mpi_handles.h"
#include "comm/mpi/mpi_reduce_ops.h"

namespace zrt::comm {

struct MpiTarget;
class ProgressThread;
class ShmTeam;
class Watchdog;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, CommOptions options = CommOptions::fromEnvironment());
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "mpi"; }
  Work post(Collective op) override;
  // Runs on the calling thread when nothing is pending (saves the hand-off latency of small
  // blocking calls); else posts and waits.
  void run(Collective op) override;
  const CommStats& stats() const override { return stats_; }
  CommStats& stats() override { return stats_; }
  // With shared memory: a buffer in an MPI shared window (collective over the node), which the
  // shm path reads in place when every rank's buffers of an operation are such buffers.
  CommBuffer allocateBuffer(std::size_t bytes) override;
  // A new MpiCommunicator with the same options over a duplicate of the same ranks.
  std::unique_ptr<Communicator> duplicate() override;
  InFlight inFlight() const override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setDivergenceTimeout(std::chrono::milliseconds bound) override;

  // The path `op` takes: Mpi or Shm (never Auto); the same on every rank.
  CommPath pathFor(const Collective& op) const;
  const CommOptions& options() const { return options_; }
  // Whether the shared-memory path exists (some node has several ranks), and over how many nodes.
  bool hasSharedMemory() const { return team_ != nullptr; }
  int numNodes() const;

 private:
  std::string_view pathName(const Collective& op) const;  // for descriptions
  void failIfPeerLost() const;
  void runOp(const Collective& op, std::uint64_t seq);
  void checkConsistency(const Collective& op, std::uint64_t seq);
  void runMpi(const Collective& op);
  MpiTarget mpiTarget(MPI_Comm comm, DType dtype) const;

  CommOptions options_;
  int rank_ = 0;
  int size_ = 1;
  int nodes_ = 1;
  MpiCommHandle opComm_;     // MPI-path collectives
  MpiCommHandle checkComm_;  // consistency checks
  MpiCommHandle laneComm_;   // what duplicate() duplicates, touched by no operation
  MpiReduceOps ops_;
  std::unique_ptr<ShmTeam> team_;
  std::vector<char> scratch_;
  CommStats stats_;
  std::unique_ptr<ProgressThread> progress_;
  std::unique_ptr<Watchdog> watchdog_;  // Destroyed first: it watches progress_.
};

}  // namespace zrt::comm
