// NcclCommunicator: the GPU backend. One NCCL communicator per rank (NcclComm); built from an
// MPI communicator, rank 0 creates the unique id and MPI_Bcast hands it to the others. Each
// operation runs on a dedicated communication stream that first waits (through an event) for
// the work already queued on the compute stream, and its Work completes with an event recorded
// after it: waitOnStream(work, computeStream) makes later compute wait for the result without
// blocking the host; Work::wait blocks the host. Per-rank counts that NCCL has no call for run
// as a group of ncclReduce / ncclBroadcast. A watchdog thread retires finished operations into
// the statistics (time = post to observed completion, 1 ms polling) and, when one outlives the
// timeout, reports it (operation, bytes), aborts the NCCL communicator and, when MPI is up,
// calls MPI_Abort. The NCCL communicator is nonblocking (NcclComm): joining it, a first
// collective that connects peers, and finalising it are waited for with the same timeout.
// Thread-safety: see Communicator; posts are serialised (NCCL calls on one communicator must
// not overlap), and abort() may be called from any thread.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "comm/nccl/nccl_comm.h"
#include "core/cuda/cuda_device.h"

namespace zrt::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm` (one rank per GPU, or several ranks per GPU with NCCL's support).
  NcclCommunicator(CudaDevice& device, Stream& computeStream, MPI_Comm comm,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(600'000));
  // From an id obtained elsewhere (tests driving several GPUs from threads of one process).
  NcclCommunicator(CudaDevice& device, Stream& computeStream, const ncclUniqueId& id, int rank,
                   int size, std::chrono::milliseconds timeout = std::chrono::milliseconds(600'000));
  ~NcclCommunicator() override;

  static ncclUniqueId newUniqueId();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "nccl"; }
  bool takesHostMemory() const override { return false; }
  // Device memory (CommBuffer::onDevice), charged by the device as CommBuckets.
  CommBuffer allocateBuffer(std::size_t bytes) override { return CommBuffer::onDevice(device_, bytes); }
  Work post(Collective op) override;
  const CommStats& stats() const override { return stats_; }
  CommStats& stats() override { return stats_; }
  // The oldest operation not yet finished on the comm stream, timed from its post (a stream
  // does not say when its work starts).
  InFlight inFlight() const override;

  // Tears the communicator down at once (a post waiting on NCCL gives up first); later
  // operations fail with PeerError.
  void abort();
  // Called with the report when an operation outlives the timeout (default: log, abort NCCL,
  // MPI_Abort when MPI is initialised, else std::abort).
  void setOnTimeout(std::function<void(const std::string&)> onTimeout);
  void setTimeout(std::chrono::milliseconds timeout) override;

 private:
  struct Pending {
    std::shared_ptr<Event> done;
    std::string description;
    OpKind kind;
    std::uint64_t bytes;
    std::chrono::steady_clock::time_point posted;
  };
  void start(std::chrono::milliseconds timeout);
  void enqueueNccl(const Collective& op);
  void watch();

  CudaDevice& device_;
  Stream& compute_;
  std::unique_ptr<Stream> commStream_;
  std::unique_ptr<Event> ready_;
  DeviceMemory barrierScratch_;
  NcclComm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::uint64_t seq_ = 0;
  CommStats stats_;
  std::chrono::milliseconds timeout_{600'000};

  std::mutex postMu_;  // serialises posts and abort (the NCCL calls on comm_)
  mutable std::mutex mu_;  // inFlight_, onTimeout_, stop_, timeout_
  std::condition_variable cv_;
  std::deque<Pending> inFlight_;
  std::function<void(const std::string&)> onTimeout_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace zrt::comm
