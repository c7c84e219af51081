#include "comm/communicator.h"

#include <cstdlib>

#include "comm/comm_options.h"
#include "core/error.h"
#include "core/log.h"

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

void Communicator::useConfigTimeout(double seconds) {
  if (!(seconds > 0))
    ZRT_THROW(InvalidArgument, "comm timeout must be positive, got ", seconds, " s");
  const char* variable = std::getenv("ZRT_COMM_TIMEOUT_S");
  const bool fromEnvironment = variable && *variable;
  const std::chrono::milliseconds timeout = secondsFromEnvironment("ZRT_COMM_TIMEOUT_S", seconds);
  setTimeout(timeout);
  const double applied = static_cast<double>(timeout.count()) / 1000.0;
  if (fromEnvironment)
    ZRT_INFO("comm timeout ", applied, " s from ZRT_COMM_TIMEOUT_S (the config says ", seconds, " s)");
  else
    ZRT_INFO("comm timeout ", applied, " s from zrt.comm_timeout_s");
}

void Communicator::useConfigDivergenceTimeout(double seconds) {
  if (!(seconds >= 0))
    ZRT_THROW(InvalidArgument, "divergence timeout must be 0 (off) or positive, got ", seconds, " s");
  setDivergenceTimeout(nonNegativeSecondsFromEnvironment("ZRT_DIVERGENCE_TIMEOUT_S", seconds));
}

}  // namespace zrt::comm
