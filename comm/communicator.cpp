#include "comm/communicator.h"

namespace zrt::comm {

Collective allReduceOp(const void* send, void* recv, std::size_t count, DType dtype) {
  Collective op;
  op.kind = OpKind::AllReduce;
  op.dtype = dtype;
  op.send = send;
  op.recv = recv;
  op.count = count;
  return op;
}

Collective reduceScatterOp(const void* send, void* recv, std::vector<std::size_t> counts,
                           DType dtype) {
  Collective op;
  op.kind = OpKind::ReduceScatter;
  op.dtype = dtype;
  op.send = send;
  op.recv = recv;
  op.counts = std::move(counts);
  return op;
}

Collective allGatherOp(const void* send, void* recv, std::vector<std::size_t> counts, DType dtype,
                       std::vector<std::size_t> displs) {
  Collective op;
  op.kind = OpKind::AllGather;
  op.dtype = dtype;
  op.send = send;
  op.recv = recv;
  op.counts = std::move(counts);
  op.displs = std::move(displs);
  return op;
}

Collective broadcastOp(void* buf, std::size_t count, DType dtype, int root) {
  Collective op;
  op.kind = OpKind::Broadcast;
  op.dtype = dtype;
  op.send = buf;
  op.recv = buf;
  op.count = count;
  op.root = root;
  return op;
}

}  // namespace zrt::comm
