#include "comm/collective.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/units.h"

namespace zrt::comm {

std::string_view nameOf(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "allReduce";
    case OpKind::ReduceScatter: return "reduceScatter";
    case OpKind::AllGather: return "allGather";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Barrier: return "barrier";
  }
  return "?";
}

std::size_t totalCount(const Collective& op) {
  switch (op.kind) {
    case OpKind::AllReduce:
    case OpKind::Broadcast: return op.count;
    case OpKind::ReduceScatter:
    case OpKind::AllGather: return std::accumulate(op.counts.begin(), op.counts.end(), std::size_t{0});
    case OpKind::Barrier: return 0;
  }
  return 0;
}

std::uint64_t opBytes(const Collective& op) {
  return static_cast<std::uint64_t>(totalCount(op)) * dtypeSize(op.dtype);
}

double busFactor(OpKind kind, int worldSize) {
  const double n = worldSize;
  switch (kind) {
    case OpKind::AllReduce: return 2.0 * (n - 1) / n;
    case OpKind::ReduceScatter:
    case OpKind::AllGather: return (n - 1) / n;
    case OpKind::Broadcast: return 1.0;
    case OpKind::Barrier: return 0.0;
  }
  return 0.0;
}

std::size_t segmentOffset(const Collective& op, int rank) {
  if (op.kind == OpKind::AllGather && !op.displs.empty()) return op.displs.at(rank);
  std::size_t off = 0;
  for (int r = 0; r < rank; ++r) off += op.counts.at(r);
  return off;
}

BufferBytes bufferBytes(const Collective& op, int rank) {
  const std::size_t es = dtypeSize(op.dtype);
  const auto me = static_cast<std::size_t>(rank);
  switch (op.kind) {
    case OpKind::AllReduce: return {op.count * es, op.count * es};
    case OpKind::Broadcast: return {0, op.count * es};
    case OpKind::ReduceScatter: return {totalCount(op) * es, op.counts[me] * es};
    case OpKind::AllGather: return {op.counts[me] * es, recvExtent(op) * es};
    case OpKind::Barrier: break;
  }
  return {};
}

std::size_t recvExtent(const Collective& op) {
  switch (op.kind) {
    case OpKind::AllReduce:
    case OpKind::Broadcast: return op.count;
    case OpKind::ReduceScatter: return 0;  // per rank: counts[rank]
    case OpKind::AllGather: {
      std::size_t end = 0;
      for (std::size_t r = 0; r < op.counts.size(); ++r)
        end = std::max(end, segmentOffset(op, static_cast<int>(r)) + op.counts[r]);
      return end;
    }
    case OpKind::Barrier: return 0;
  }
  return 0;
}

bool isInPlace(const Collective& op, int rank) {
  const std::size_t es = dtypeSize(op.dtype);
  switch (op.kind) {
    case OpKind::AllReduce: return op.send == op.recv;
    case OpKind::ReduceScatter:
      return op.recv == static_cast<const char*>(op.send) + segmentOffset(op, rank) * es;
    case OpKind::AllGather:
      return op.send == static_cast<const char*>(op.recv) + segmentOffset(op, rank) * es;
    case OpKind::Broadcast: return true;
    case OpKind::Barrier: return true;
  }
  return false;
}

namespace {

bool overlaps(const void* a, std::size_t aBytes, const void* b, std::size_t bBytes) {
  if (aBytes == 0 || bBytes == 0) return false;
  auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + bBytes && pb < pa + aBytes;
}

}  // namespace

void validate(const Collective& op, int rank, int worldSize) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize)
    ZRT_THROW(InvalidArgument, describe(op), ": rank ", rank, " outside a world of ", worldSize);
  const std::size_t es = dtypeSize(op.dtype);
  switch (op.kind) {
    case OpKind::Barrier: return;
    case OpKind::Broadcast:
      if (op.root < 0 || op.root >= worldSize)
        ZRT_THROW(InvalidArgument, describe(op), ": root ", op.root, " outside a world of ", worldSize);
      if (op.count > 0 && op.recv == nullptr)
        ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank, ": null buffer");
      return;
    case OpKind::AllReduce:
      if (op.count > 0 && (op.send == nullptr || op.recv == nullptr))
        ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank, ": null buffer");
      if (op.send != op.recv && overlaps(op.send, op.count * es, op.recv, op.count * es))
        ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank,
                  ": send and recv overlap without being the same buffer");
      return;
    case OpKind::ReduceScatter:
    case OpKind::AllGather: break;
  }
  if (op.counts.size() != static_cast<std::size_t>(worldSize))
    ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank, ": ", op.counts.size(),
              " per-rank counts given for a world of ", worldSize);
  const std::size_t total = totalCount(op);
  const std::size_t mine = op.counts[static_cast<std::size_t>(rank)];
  if (op.kind == OpKind::ReduceScatter) {
    if ((total > 0 && op.send == nullptr) || (mine > 0 && op.recv == nullptr))
      ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank, ": null buffer");
    if (!isInPlace(op, rank) && overlaps(op.send, total * es, op.recv, mine * es))
      ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank,
                ": recv overlaps send but is not this rank's segment of it (in place)");
    return;
  }
  // AllGather
  if (!op.displs.empty()) {
    if (op.displs.size() != op.counts.size())
      ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank, ": ", op.displs.size(),
                " displacements for ", op.counts.size(), " counts");
    std::vector<int> order(op.counts.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return op.displs[a] < op.displs[b]; });
    for (std::size_t i = 1; i < order.size(); ++i) {
      const int a = order[i - 1], b = order[i];
      if (op.counts[a] > 0 && op.counts[b] > 0 && op.displs[a] + op.counts[a] > op.displs[b])
        ZRT_THROW(InvalidArgument, describe(op), ": the output segments of ranks ", a, " and ", b,
                  " overlap (displacement ", op.displs[a], " + count ", op.counts[a], " > ",
                  op.displs[b], ")");
    }
  }
  const std::size_t extent = recvExtent(op);
  if ((mine > 0 && op.send == nullptr) || (extent > 0 && op.recv == nullptr))
    ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank, ": null buffer");
  if (!isInPlace(op, rank) && overlaps(op.send, mine * es, op.recv, extent * es))
    ZRT_THROW(InvalidArgument, describe(op), " on rank ", rank,
              ": send overlaps recv but is not this rank's segment of it (in place)");
}

std::string describe(const Collective& op) {
  if (op.kind == OpKind::Barrier) return std::string(nameOf(op.kind));
  return detail::cat(nameOf(op.kind), " ", formatBytes(opBytes(op)), " ", nameOf(op.dtype));
}

std::vector<std::size_t> equalCounts(std::size_t perRank, int worldSize) {
  return std::vector<std::size_t>(static_cast<std::size_t>(worldSize), perRank);
}

}  // namespace zrt::comm
