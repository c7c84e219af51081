// Communicator: the one interface ZRT's collectives go through, whatever the backend (MPI with
// its shared-memory path, NCCL, ranks as threads in one process). A backend implements post():
// it validates the operation, queues it and returns a Work handle; operations run in the order
// they were posted, which must be the same order on every rank. Everything else here is a
// convenience built on post(), so a test fake only needs rank(), size(), post() and stats().
// Thread-safety: post() and the conveniences may be called from any thread of the owning rank,
// but the posting order across threads is the order the calls return in; keep one thread posting.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "comm/collective.h"
#include "comm/comm_buffer.h"
#include "comm/comm_stats.h"
#include "comm/work.h"

namespace zrt::comm {

// Collective descriptors for the conveniences below (plain data, see collective.h).
Collective allReduceOp(const void* send, void* recv, std::size_t count, DType dtype);
Collective reduceScatterOp(const void* send, void* recv, std::vector<std::size_t> counts,
                           DType dtype);
Collective allGatherOp(const void* send, void* recv, std::vector<std::size_t> counts, DType dtype,
                       std::vector<std::size_t> displs);
Collective broadcastOp(void* buf, std::size_t count, DType dtype, int root);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "threads", "nccl", "staged(mpi)".
  virtual std::string backendName() const = 0;
  // Whether operations take host memory (MPI, threads, staged); NCCL's take device memory only.
  virtual bool takesHostMemory() const { return true; }
  // Queues `op` after everything posted before; throws InvalidArgument when it is malformed.
  virtual Work post(Collective op) = 0;
  virtual const CommStats& stats() const = 0;
  virtual CommStats& stats() = 0;
  // Memory this backend moves fastest (CommBuffer). Collective for the MPI backend: every rank
  // allocates (its own size) in the same order. The default is ordinary host memory.
  virtual CommBuffer allocateBuffer(std::size_t bytes) { return CommBuffer::host(bytes); }
  // Where allocateBuffer's memory lives. Host: whoever asked charges it to a ledger (the
  // bucketers do, in kBucketMemoryPlace). Device: a device allocation the device has charged.
  virtual MemPlace bufferPlace() const { return takesHostMemory() ? MemPlace::Host : MemPlace::Device; }
  // A communicator over the same ranks whose operations do not queue behind this one's (its own
  // progress thread and MPI communicator): a second lane, so parameter gathers need not wait for
  // gradient reductions. Collective. nullptr when the backend has no separate lanes.
  virtual std::unique_ptr<Communicator> duplicate() { return nullptr; }
  // The operation running now and for how long, as the watchdog sees it (the live metrics'
  // oldest wait: operations run one at a time in posting order, so it is the oldest one
  // outstanding). The default, for backends without a progress thread: nothing running.
  virtual InFlight inFlight() const { return {}; }

  // How long an operation may run before the backend's watchdog reports it and ends the job,
  // from now on (an operation already running included); lanes duplicate() makes later inherit
  // it. Call it from the posting thread. The default, for backends without a watchdog: ignored.
  virtual void setTimeout(std::chrono::milliseconds timeout) { (void)timeout; }
  // setTimeout to a config's zrt.comm_timeout_s, unless ZRT_COMM_TIMEOUT_S is set: the variable
  // overrides the config for one run (docs/comm.md). So whoever owns the config applies it, and
  // the Engine does for the communicator it is given. Throws InvalidArgument when `seconds` is
  // not positive or the variable is malformed.
  void useConfigTimeout(double seconds);
  // How long a peer may be in no ZRT call while an operation waits for it before the watchdog
  // reports the ranks as diverged (comm/mpi/watchdog.h); 0: no divergence probe. The default,
  // for backends without a watchdog: ignored.
  virtual void setDivergenceTimeout(std::chrono::milliseconds bound) { (void)bound; }
  // setDivergenceTimeout to a config's zrt.divergence_timeout_s, unless ZRT_DIVERGENCE_TIMEOUT_S
  // is set (it overrides the config, as ZRT_COMM_TIMEOUT_S does). Throws InvalidArgument when
  // `seconds` is negative or the variable is malformed.
  void useConfigDivergenceTimeout(double seconds);

  // Runs `op` and waits for it (the blocking conveniences use it). A backend may run it on the
  // calling thread when nothing else is pending; the default posts and waits.
  virtual void run(Collective op) { post(std::move(op)).wait(); }

  // --- Asynchronous conveniences --------------------------------------------------------------
  Work allReduceAsync(const void* send, void* recv, std::size_t count, DType dtype) {
    return post(allReduceOp(send, recv, count, dtype));
  }
  Work allReduceAsync(void* buf, std::size_t count, DType dtype) {
    return post(allReduceOp(buf, buf, count, dtype));
  }
  // Equal segments of recvCount elements per rank.
  Work reduceScatterAsync(const void* send, void* recv, std::size_t recvCount, DType dtype) {
    return post(reduceScatterOp(send, recv, equalCounts(recvCount, size()), dtype));
  }
  // Per-rank segments (recvCounts.size() == size()).
  Work reduceScatterAsync(const void* send, void* recv, std::span<const std::size_t> recvCounts,
                          DType dtype) {
    return post(reduceScatterOp(send, recv, {recvCounts.begin(), recvCounts.end()}, dtype));
  }
  Work allGatherAsync(const void* send, void* recv, std::size_t sendCount, DType dtype) {
    return post(allGatherOp(send, recv, equalCounts(sendCount, size()), dtype, {}));
  }
  // Per-rank contributions placed at displs (packed in rank order when displs is empty).
  Work allGatherAsync(const void* send, void* recv, std::span<const std::size_t> counts,
                      DType dtype, std::span<const std::size_t> displs = {}) {
    return post(allGatherOp(send, recv, {counts.begin(), counts.end()}, dtype,
                            {displs.begin(), displs.end()}));
  }
  Work broadcastAsync(void* buf, std::size_t count, DType dtype, int root) {
    return post(broadcastOp(buf, count, dtype, root));
  }
  Work barrierAsync() { return post(Collective{}); }

  // --- Blocking conveniences (default timeout) --------------------------------------------------
  void allReduce(const void* send, void* recv, std::size_t count, DType dtype) {
    run(allReduceOp(send, recv, count, dtype));
  }
  void allReduce(void* buf, std::size_t count, DType dtype) {
    run(allReduceOp(buf, buf, count, dtype));
  }
  void reduceScatter(const void* send, void* recv, std::size_t recvCount, DType dtype) {
    run(reduceScatterOp(send, recv, equalCounts(recvCount, size()), dtype));
  }
  void reduceScatter(const void* send, void* recv, std::span<const std::size_t> recvCounts,
                     DType dtype) {
    run(reduceScatterOp(send, recv, {recvCounts.begin(), recvCounts.end()}, dtype));
  }
  void allGather(const void* send, void* recv, std::size_t sendCount, DType dtype) {
    run(allGatherOp(send, recv, equalCounts(sendCount, size()), dtype, {}));
  }
  void allGather(const void* send, void* recv, std::span<const std::size_t> counts, DType dtype,
                 std::span<const std::size_t> displs = {}) {
    run(allGatherOp(send, recv, {counts.begin(), counts.end()}, dtype,
                    {displs.begin(), displs.end()}));
  }
  void broadcast(void* buf, std::size_t count, DType dtype, int root) {
    run(broadcastOp(buf, count, dtype, root));
  }
  void barrier() { run(Collective{}); }
};

}  // namespace zrt::comm
