// Communicator: the one interface ZRT's collectives go through, whatever the backend (MPI with
// its shared-memory path, NCCL, ranks as threads in one process). A backend implements post():
// it validates the operation, queues it and returns a Work handle; operations run in the order
// they were posted, which must be the same order on every rank. Everything else here is a
// convenience built on post(), so a test fake only needs rank(), size(), post() and stats().
// Thread-safety: post() and the conveniences may be called from any thread of the owning rank,
// but the posting order across threads is the order the calls return in; keep one thread posting.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "comm/collective.h"
#include "comm/comm_stats.h"
#include "comm/work.h"

namespace zrt::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "threads", "nccl", "staged(mpi)".
  virtual std::string backendName() const = 0;
  // Queues `op` after everything posted before; throws InvalidArgument when it is malformed.
  virtual Work post(Collective op) = 0;
  virtual const CommStats& stats() const = 0;
  virtual CommStats& stats() = 0;

  // --- Asynchronous conveniences --------------------------------------------------------------
  Work allReduceAsync(const void* send, void* recv, std::size_t count, DType dtype);
  Work allReduceAsync(void* buf, std::size_t count, DType dtype) {
    return allReduceAsync(buf, buf, count, dtype);
  }
  // Equal segments of recvCount elements per rank.
  Work reduceScatterAsync(const void* send, void* recv, std::size_t recvCount, DType dtype);
  // Per-rank segments (recvCounts.size() == size()).
  Work reduceScatterAsync(const void* send, void* recv, std::span<const std::size_t> recvCounts,
                          DType dtype);
  Work allGatherAsync(const void* send, void* recv, std::size_t sendCount, DType dtype);
  // Per-rank contributions placed at displs (packed in rank order when displs is empty).
  Work allGatherAsync(const void* send, void* recv, std::span<const std::size_t> counts,
                      DType dtype, std::span<const std::size_t> displs = {});
  Work broadcastAsync(void* buf, std::size_t count, DType dtype, int root);
  Work barrierAsync();

  // --- Blocking conveniences: post and wait (default timeout) ---------------------------------
  void allReduce(const void* send, void* recv, std::size_t count, DType dtype) {
    allReduceAsync(send, recv, count, dtype).wait();
  }
  void allReduce(void* buf, std::size_t count, DType dtype) {
    allReduceAsync(buf, count, dtype).wait();
  }
  void reduceScatter(const void* send, void* recv, std::size_t recvCount, DType dtype) {
    reduceScatterAsync(send, recv, recvCount, dtype).wait();
  }
  void reduceScatter(const void* send, void* recv, std::span<const std::size_t> recvCounts,
                     DType dtype) {
    reduceScatterAsync(send, recv, recvCounts, dtype).wait();
  }
  void allGather(const void* send, void* recv, std::size_t sendCount, DType dtype) {
    allGatherAsync(send, recv, sendCount, dtype).wait();
  }
  void allGather(const void* send, void* recv, std::span<const std::size_t> counts, DType dtype,
                 std::span<const std::size_t> displs = {}) {
    allGatherAsync(send, recv, counts, dtype, displs).wait();
  }
  void broadcast(void* buf, std::size_t count, DType dtype, int root) {
    broadcastAsync(buf, count, dtype, root).wait();
  }
  void barrier() { barrierAsync().wait(); }
};

}  // namespace zrt::comm
