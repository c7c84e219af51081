#include "comm/communicator.h"

namespace zrt::comm {

Collective allReduceOp(const void* send, void* recv, std::size_t count, DType dtype) {
  return Collective{.kind = OpKind::AllReduce, .dtype = dtype, .send = send, .recv = recv,
                    .count = count};
}

Collective reduceScatterOp(const void* send, void* recv, std::vector<std::size_t> counts,
                           DType dtype) {
  return Collective{.kind = OpKind::ReduceScatter, .dtype = dtype, .send = send, .recv = recv,
                    .counts = std::move(counts)};
}

Collective allGatherOp(const void* send, void* recv, std::vector<std::size_t> counts, DType dtype,
                       std::vector<std::size_t> displs) {
  return Collective{.kind = OpKind::AllGather, .dtype = dtype, .send = send, .recv = recv,
                    .counts = std::move(counts), .displs = std::move(displs)};
}

Collective broadcastOp(void* buf, std::size_t count, DType dtype, int root) {
  return Collective{.kind = OpKind::Broadcast, .dtype = dtype, .send = buf, .recv = buf,
                    .count = count, .root = root};
}

}  // namespace zrt::comm
