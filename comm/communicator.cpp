#include "comm/communicator.h"

namespace zrt::comm {

Work Communicator::allReduceAsync(const void* send, void* recv, std::size_t count, DType dtype) {
  Collective op;
  op.kind = OpKind::AllReduce;
  op.dtype = dtype;
  op.send = send;
  op.recv = recv;
  op.count = count;
  return post(std::move(op));
}

Work Communicator::reduceScatterAsync(const void* send, void* recv, std::size_t recvCount,
                                      DType dtype) {
  const auto counts = equalCounts(recvCount, size());
  return reduceScatterAsync(send, recv, std::span<const std::size_t>(counts), dtype);
}

Work Communicator::reduceScatterAsync(const void* send, void* recv,
                                      std::span<const std::size_t> recvCounts, DType dtype) {
  Collective op;
  op.kind = OpKind::ReduceScatter;
  op.dtype = dtype;
  op.send = send;
  op.recv = recv;
  op.counts.assign(recvCounts.begin(), recvCounts.end());
  return post(std::move(op));
}

Work Communicator::allGatherAsync(const void* send, void* recv, std::size_t sendCount,
                                  DType dtype) {
  const auto counts = equalCounts(sendCount, size());
  return allGatherAsync(send, recv, std::span<const std::size_t>(counts), dtype);
}

Work Communicator::allGatherAsync(const void* send, void* recv,
                                  std::span<const std::size_t> counts, DType dtype,
                                  std::span<const std::size_t> displs) {
  Collective op;
  op.kind = OpKind::AllGather;
  op.dtype = dtype;
  op.send = send;
  op.recv = recv;
  op.counts.assign(counts.begin(), counts.end());
  op.displs.assign(displs.begin(), displs.end());
  return post(std::move(op));
}

Work Communicator::broadcastAsync(void* buf, std::size_t count, DType dtype, int root) {
  Collective op;
  op.kind = OpKind::Broadcast;
  op.dtype = dtype;
  op.send = buf;
  op.recv = buf;
  op.count = count;
  op.root = root;
  return post(std::move(op));
}

Work Communicator::barrierAsync() {
  Collective op;
  op.kind = OpKind::Barrier;
  return post(std::move(op));
}

}  // namespace zrt::comm
