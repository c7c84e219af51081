// One collective as a rank posts it, as plain data: kind, element type, buffers and per-rank
// counts. Every backend validates a Collective the same way (validate) and reports the same byte
// counts (opBytes, busFactor: the nccl-tests definitions). Pure functions; thread-safe.
//
// Buffer conventions (NCCL's):
//   AllReduce      send[count] -> recv[count]; in place when send == recv.
//   ReduceScatter  send holds every rank's segment in rank order (counts[r] elements each);
//                  rank r receives the sum of segment r in recv[counts[r]]. In place when
//                  recv == send + offset of segment r.
//   AllGather      rank r contributes send[counts[r]]; every rank receives all contributions in
//                  recv, at displs[r] (packed in rank order when displs is empty). In place when
//                  send == recv + displs[r].
//   Broadcast      recv[count] on every rank takes root's recv (send is ignored).
//   Barrier        no data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace zrt::comm {

enum class OpKind : int { AllReduce = 0, ReduceScatter, AllGather, Broadcast, Barrier };
inline constexpr int kNumOpKinds = 5;
std::string_view nameOf(OpKind kind);

struct Collective {
  OpKind kind = OpKind::Barrier;
  DType dtype = DType::F32;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;                // AllReduce, Broadcast
  std::vector<std::size_t> counts{};    // ReduceScatter, AllGather: one per rank
  std::vector<std::size_t> displs{};    // AllGather: one per rank, or empty (packed)
  int root = 0;                         // Broadcast
};

// Elements of the full buffer: count (AllReduce, Broadcast) or the sum of counts.
std::size_t totalCount(const Collective& op);
// nccl-tests' "size" of an operation: bytes of the full buffer (0 for a barrier).
std::uint64_t opBytes(const Collective& op);
// busbw = algbw * busFactor: 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and
// all-gather, 1 for broadcast (nccl-tests' definitions).
double busFactor(OpKind kind, int worldSize);

// The operation a communicator is running now, as its watchdog times it (live metrics).
struct InFlight {
  bool running = false;
  OpKind kind = OpKind::Barrier;
  double seconds = 0;  // since it started running
};

// Where rank r's segment starts, in elements: in send for ReduceScatter, in recv for AllGather.
std::size_t segmentOffset(const Collective& op, int rank);
// One past the last element written to recv on any rank (AllGather: max displs[r] + counts[r]).
std::size_t recvExtent(const Collective& op);
bool isInPlace(const Collective& op, int rank);
// The bytes of send that `rank`'s part of `op` reads and of recv that it may write, from each
// pointer on. A broadcast reads nothing from send: its input is the root's recv.
struct BufferBytes {
  std::size_t send = 0, recv = 0;
};
BufferBytes bufferBytes(const Collective& op, int rank);

// Throws InvalidArgument naming the rank and the problem when `op` cannot run on a world of
// `worldSize` ranks: wrong number of counts, overlapping all-gather segments, null buffers with
// data, a root outside the world, overlapping out-of-place buffers.
void validate(const Collective& op, int rank, int worldSize);

// "allReduce 4.00 KiB fp32", for messages and statistics.
std::string describe(const Collective& op);

// The equal per-rank counts of a buffer of `perRank * worldSize` elements.
std::vector<std::size_t> equalCounts(std::size_t perRank, int worldSize);

}  // namespace zrt::comm
