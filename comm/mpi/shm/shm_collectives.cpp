#include "comm/mpi/shm/shm_collectives.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/mpi/mpi_large_counts.h"
#include "core/element_arithmetic.h"
#include "core/error.h"

namespace zrt::comm {
namespace {

// Elements per staging slot when a half is split into `slots` 64-byte-aligned slots.
std::size_t slotElems(const ShmTeam& team, int slots, std::size_t es) {
  const std::size_t slotBytes = team.halfBytes() / static_cast<std::size_t>(slots) / 64 * 64;
  return slotBytes / es;
}

std::size_t clampLen(std::size_t total, std::size_t from, std::size_t len) {
  return from >= total ? 0 : std::min(len, total - from);
}

void copyBytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes && dst != src) std::memcpy(dst, src, bytes);
}

// Local rank j's segment of a buffer: [begin[j], begin[j] + len[j]) elements.
struct Segments {
  std::vector<std::size_t> begin, len;
  std::size_t longest() const { return len.empty() ? 0 : *std::max_element(len.begin(), len.end()); }
};

// An even split of `count` elements over `parts` ranks (the first count % parts get one more).
Segments evenSegments(std::size_t count, int parts) {
  const auto n = static_cast<std::size_t>(parts);
  Segments s;
  for (std::size_t j = 0, at = 0; j < n; ++j) {
    s.begin.push_back(at);
    s.len.push_back(count / n + (j < count % n ? 1 : 0));
    at += s.len.back();
  }
  return s;
}

// The operation's own per-rank segments (single node: local rank == world rank).
Segments opSegments(const Collective& op) {
  Segments s;
  for (std::size_t r = 0; r < op.counts.size(); ++r) {
    s.begin.push_back(segmentOffset(op, static_cast<int>(r)));
    s.len.push_back(op.counts[r]);
  }
  return s;
}

// Pointers to part `slotIndex` of every local rank's staging half `h`.
std::vector<const void*> stagedParts(const ShmTeam& t, int h, std::size_t slotIndex,
                                     std::size_t slotBytes) {
  std::vector<const void*> srcs(static_cast<std::size_t>(t.localSize()));
  for (int r = 0; r < t.localSize(); ++r)
    srcs[static_cast<std::size_t>(r)] = t.staging(r, h) + slotIndex * slotBytes;
  return srcs;
}

// The node's ranks reduce `send` together, in rounds of one staging half: local rank j owns
// segment j. Each round every rank stages its part of every segment in slot j of its staging
// half, then each owner sums slot j of every rank's staging. The sum of this rank's segment goes
// to `ownOut` (reduce-scatter), or with `gather` stays in the owner's slot, and after a second
// barrier every rank that has a `gatherOut` copies every segment's sum there (all-reduce; a null
// gatherOut still keeps the barriers in step).
void nodeReduce(const ShmContext& c, const char* send, DType dtype, const Segments& seg,
                char* ownOut, bool gather, char* gatherOut) {
  ShmTeam& t = c.team;
  const int L = t.localSize(), me = t.localRank();
  const auto mine = static_cast<std::size_t>(me);
  const std::size_t es = dtypeSize(dtype);
  const std::size_t slot = slotElems(t, L, es), slotBytes = slot * es;
  const std::size_t rounds = (seg.longest() + slot - 1) / slot;
  for (std::size_t k = 0; k < rounds; ++k) {
    const int h = t.nextHalf();
    const std::size_t from = k * slot;
    char* staging = t.staging(me, h);
    for (std::size_t j = 0; j < seg.len.size(); ++j)
      copyBytes(staging + j * slotBytes, send + (seg.begin[j] + from) * es,
                clampLen(seg.len[j], from, slot) * es);
    t.barrier(c.deadline, c.what);  // every rank's parts of this round are staged
    // (ownOut may be null when this rank's segment is empty.)
    char* sum = gather ? staging + mine * slotBytes : ownOut ? ownOut + from * es : nullptr;
    sumInto(dtype, sum, stagedParts(t, h, mine, slotBytes).data(), L,
            clampLen(seg.len[mine], from, slot));
    if (!gather) continue;
    t.barrier(c.deadline, c.what);  // every segment's part of this round is reduced
    if (!gatherOut) continue;
    for (std::size_t j = 0; j < seg.len.size(); ++j)
      copyBytes(gatherOut + (seg.begin[j] + from) * es,
                t.staging(static_cast<int>(j), h) + j * slotBytes,
                clampLen(seg.len[j], from, slot) * es);
  }
}

// Node-level all-reduce: the node's sum of `send` lands in `recv` on every local rank (or, with
// leaderOnly, on the leader only; others may pass recv = nullptr).
void nodeAllReduce(const ShmContext& c, const void* send, void* recv, std::size_t count,
                   DType dtype, bool leaderOnly) {
  const bool writeOut = !leaderOnly || c.team.isLeader();
  nodeReduce(c, static_cast<const char*>(send), dtype, evenSegments(count, c.team.localSize()),
             nullptr, /*gather=*/true, writeOut ? static_cast<char*>(recv) : nullptr);
}

// Copies the bytes [packedFrom, packedFrom + bytes) of a packed buffer into `recv`: the packed
// buffer holds the segments of `order` (world ranks) back to back; segment r goes to displs.
void unpackRange(const std::vector<int>& order, const Collective& op, std::size_t packedFrom,
                 const char* src, std::size_t bytes, char* recv) {
  const std::size_t es = dtypeSize(op.dtype);
  std::size_t at = 0;  // packed offset (bytes) of the current segment
  for (int r : order) {
    const std::size_t segBytes = op.counts[static_cast<std::size_t>(r)] * es;
    const std::size_t lo = std::max(at, packedFrom), hi = std::min(at + segBytes, packedFrom + bytes);
    if (lo < hi)
      copyBytes(recv + segmentOffset(op, r) * es + (lo - at), src + (lo - packedFrom), hi - lo);
    at += segBytes;
    if (at >= packedFrom + bytes) break;
  }
}

// The leader's `bytes` of `data` to every local rank, in rounds of a staging half; `sink` takes
// (packed offset, pointer, length) on the other ranks.
template <class Sink>
void nodeBroadcast(const ShmContext& c, const char* data, std::size_t bytes, Sink sink) {
  ShmTeam& t = c.team;
  const std::size_t half = t.halfBytes();
  const std::size_t rounds = (bytes + half - 1) / half;
  for (std::size_t k = 0; k < rounds; ++k) {
    const int h = t.nextHalf();
    const std::size_t from = k * half, len = std::min(half, bytes - from);
    if (t.isLeader()) copyBytes(t.staging(0, h), data + from, len);
    t.barrier(c.deadline, c.what);  // the leader's round is staged
    if (!t.isLeader()) sink(from, t.staging(0, h), len);
  }
}

MpiTarget leaderTarget(const ShmContext& c, DType dtype) {
  return MpiTarget{c.team.leaderComm(), MpiReduceOps::datatype(dtype), dtypeSize(dtype),
                   c.maxMpiCount};
}

void leaderAllReduce(const ShmContext& c, void* buf, std::size_t count, DType dtype) {
  mpiAllReduce(leaderTarget(c, dtype), c.ops.sum(dtype), buf, buf, count);
}

// Every local rank's published send buffer, `offsetBytes` in (after allInRegions).
std::vector<const void*> peerSends(const ShmTeam& t, std::size_t offsetBytes) {
  std::vector<const void*> srcs(static_cast<std::size_t>(t.localSize()));
  for (int r = 0; r < t.localSize(); ++r)
    srcs[static_cast<std::size_t>(r)] = t.address(r, t.peerSend(r)) + offsetBytes;
  return srcs;
}

// Publishes where this rank's buffers lie and returns whether every rank's lie in shared regions
// (send, and recv when `withRecv`): then the operation reads its peers' buffers in place. Single
// node only; the answer is the same on every rank.
bool allInRegions(const ShmContext& c, const void* send, std::size_t sendBytes, const void* recv,
                  std::size_t recvBytes, bool withRecv) {
  ShmTeam& t = c.team;
  const ShmLocation s = t.locate(send, sendBytes);
  const ShmLocation r = withRecv ? t.locate(recv, recvBytes) : ShmLocation{};
  t.publish(s, r, c.deadline, c.what);
  for (int q = 0; q < t.localSize(); ++q)
    if (t.peerSend(q).region == 0 || (withRecv && t.peerRecv(q).region == 0)) return false;
  return true;
}

}  // namespace

void shmAllReduce(const ShmContext& c, const Collective& op) {
  ShmTeam& t = c.team;
  if (t.numNodes() == 1) {
    const std::size_t es = dtypeSize(op.dtype), bytes = op.count * es;
    if (!allInRegions(c, op.send, bytes, op.recv, bytes, /*withRecv=*/true))
      return nodeAllReduce(c, op.send, op.recv, op.count, op.dtype, false);
    // In place in the peers' buffers: sum my segment of everyone's input into my output, then
    // copy the other segments from their owners' outputs.
    const int L = t.localSize();
    const auto me = static_cast<std::size_t>(t.localRank());
    const Segments seg = evenSegments(op.count, L);
    auto* out = static_cast<char*>(op.recv);
    sumInto(op.dtype, out + seg.begin[me] * es, peerSends(t, seg.begin[me] * es).data(), L,
            seg.len[me]);
    t.barrier(c.deadline, c.what);  // every segment is reduced
    for (std::size_t j = 0; j < seg.len.size(); ++j)
      if (j != me)
        copyBytes(out + seg.begin[j] * es,
                  t.address(static_cast<int>(j), t.peerRecv(static_cast<int>(j))) + seg.begin[j] * es,
                  seg.len[j] * es);
    t.barrier(c.deadline, c.what);  // nobody reads my buffers any more
    return;
  }
  nodeAllReduce(c, op.send, op.recv, op.count, op.dtype, /*leaderOnly=*/true);
  if (t.isLeader()) leaderAllReduce(c, op.recv, op.count, op.dtype);
  const std::size_t es = dtypeSize(op.dtype);
  auto* out = static_cast<char*>(op.recv);
  nodeBroadcast(c, out, op.count * es, [&](std::size_t from, const char* src, std::size_t len) {
    copyBytes(out + from, src, len);
  });
}

void shmReduceScatter(const ShmContext& c, const Collective& op) {
  ShmTeam& t = c.team;
  const std::size_t es = dtypeSize(op.dtype);
  const int L = t.localSize(), me = t.localRank();
  const auto* in = static_cast<const char*>(op.send);
  auto* out = static_cast<char*>(op.recv);
  if (t.numNodes() == 1 && allInRegions(c, op.send, totalCount(op) * es, nullptr, 0, false)) {
    // In place in the peers' inputs: sum my segment of everyone's buffer into my output.
    sumInto(op.dtype, out, peerSends(t, segmentOffset(op, me) * es).data(), L,
            op.counts[static_cast<std::size_t>(me)]);
    t.barrier(c.deadline, c.what);  // nobody reads my input any more
    return;
  }
  if (t.numNodes() == 1) {
    // Rank j owns segment j of the operation; its sum goes straight into its output.
    nodeReduce(c, in, op.dtype, opSegments(op), out, /*gather=*/false, nullptr);
    return;
  }
  // Hierarchical: the node's sum of the whole buffer at the leader, summed over leaders, then
  // each rank's segment handed out through the leader's staging.
  const std::size_t total = totalCount(op);
  std::vector<char> scratch(t.isLeader() ? total * es : 0);
  nodeAllReduce(c, op.send, scratch.data(), total, op.dtype, /*leaderOnly=*/true);
  if (t.isLeader()) leaderAllReduce(c, scratch.data(), total, op.dtype);
  const std::vector<int>& local = t.members(t.nodeIndex());
  const std::size_t slot = slotElems(t, L, es), slotBytes = slot * es;
  std::size_t longest = 0;
  for (int r : local) longest = std::max(longest, op.counts[static_cast<std::size_t>(r)]);
  const std::size_t rounds = (longest + slot - 1) / slot;
  for (std::size_t k = 0; k < rounds; ++k) {
    const int h = t.nextHalf();
    const std::size_t from = k * slot;
    if (t.isLeader()) {
      for (int j = 0; j < L; ++j) {
        const int r = local[static_cast<std::size_t>(j)];
        const std::size_t len = clampLen(op.counts[static_cast<std::size_t>(r)], from, slot);
        copyBytes(t.staging(0, h) + static_cast<std::size_t>(j) * slotBytes,
                  scratch.data() + (segmentOffset(op, r) + from) * es, len * es);
      }
    }
    t.barrier(c.deadline, c.what);  // the leader staged every local rank's part of this round
    const int r = local[static_cast<std::size_t>(me)];
    const std::size_t len = clampLen(op.counts[static_cast<std::size_t>(r)], from, slot);
    if (len > 0)  // (out may be null when this rank's segment is empty)
      copyBytes(out + from * es, t.staging(0, h) + static_cast<std::size_t>(me) * slotBytes, len * es);
  }
}

void shmAllGather(const ShmContext& c, const Collective& op) {
  ShmTeam& t = c.team;
  const std::size_t es = dtypeSize(op.dtype);
  const int L = t.localSize(), me = t.localRank();
  const auto* in = static_cast<const char*>(op.send);
  auto* out = static_cast<char*>(op.recv);
  const std::vector<int>& local = t.members(t.nodeIndex());
  const int myWorld = local[static_cast<std::size_t>(me)];
  const bool inPlace = isInPlace(op, myWorld);
  if (!inPlace)
    copyBytes(out + segmentOffset(op, myWorld) * es, in,
              op.counts[static_cast<std::size_t>(myWorld)] * es);
  if (t.numNodes() == 1 &&
      allInRegions(c, op.send, op.counts[static_cast<std::size_t>(myWorld)] * es, nullptr, 0, false)) {
    // Straight from the peers' inputs into my output.
    for (int j = 0; j < L; ++j)
      if (j != me)
        copyBytes(out + segmentOffset(op, j) * es, t.address(j, t.peerSend(j)),
                  op.counts[static_cast<std::size_t>(j)] * es);
    t.barrier(c.deadline, c.what);  // nobody reads my input any more
    return;
  }

  // Inside the node: every rank stages its contribution; each rank (or, over several nodes,
  // the leader, into a packed buffer) copies the peers' out.
  const bool multi = t.numNodes() > 1;
  std::vector<std::size_t> packOffset(static_cast<std::size_t>(L) + 1, 0);
  for (int j = 0; j < L; ++j)
    packOffset[static_cast<std::size_t>(j) + 1] =
        packOffset[static_cast<std::size_t>(j)] + op.counts[static_cast<std::size_t>(local[static_cast<std::size_t>(j)])];
  std::vector<char> nodePack(multi && t.isLeader() ? packOffset.back() * es : 0);
  const std::size_t slot = t.halfBytes() / es;
  std::size_t longest = 0;
  for (int r : local) longest = std::max(longest, op.counts[static_cast<std::size_t>(r)]);
  const std::size_t rounds = (longest + slot - 1) / slot;
  for (std::size_t k = 0; k < rounds; ++k) {
    const int h = t.nextHalf();
    const std::size_t from = k * slot;
    // A rank whose part is shorter than the longest has nothing left to stage in later rounds,
    // and one with no part at all may pass a null input: no pointer is formed past its end.
    const std::size_t mine = clampLen(op.counts[static_cast<std::size_t>(myWorld)], from, slot);
    if (mine > 0) copyBytes(t.staging(me, h), in + from * es, mine * es);
    t.barrier(c.deadline, c.what);  // every local rank's part of this round is staged
    for (int j = 0; j < L; ++j) {
      if (j == me) continue;
      const int r = local[static_cast<std::size_t>(j)];
      const std::size_t len = clampLen(op.counts[static_cast<std::size_t>(r)], from, slot);
      if (!multi)
        copyBytes(out + (segmentOffset(op, r) + from) * es, t.staging(j, h), len * es);
      else if (t.isLeader())
        copyBytes(nodePack.data() + (packOffset[static_cast<std::size_t>(j)] + from) * es,
                  t.staging(j, h), len * es);
    }
  }
  if (!multi) return;

  // Between nodes: leaders exchange their packed node contributions, then broadcast the whole
  // packed world inside the node; every rank unpacks into its own recv.
  std::vector<int> order;  // world ranks in packed order (node by node, local order)
  std::vector<std::size_t> nodeCounts, nodeDispls;
  std::size_t packed = 0;
  for (int n = 0; n < t.numNodes(); ++n) {
    std::size_t nodeTotal = 0;
    for (int r : t.members(n)) {
      order.push_back(r);
      nodeTotal += op.counts[static_cast<std::size_t>(r)];
    }
    nodeDispls.push_back(packed);
    nodeCounts.push_back(nodeTotal);
    packed += nodeTotal;
  }
  std::vector<char> all(t.isLeader() ? packed * es : 0);
  if (t.isLeader()) {
    // The leader's own contribution sits in its recv; the pack has the other local ranks'.
    copyBytes(nodePack.data(), out + segmentOffset(op, myWorld) * es,
              op.counts[static_cast<std::size_t>(myWorld)] * es);
    const std::size_t node = static_cast<std::size_t>(t.nodeIndex());
    // Not in place (nodePack is separate from all): the pack lands at the node's displacement.
    mpiAllGather(leaderTarget(c, op.dtype), nodePack.data(), all.data(), nodeCounts, nodeDispls,
                 static_cast<int>(node));
    unpackRange(order, op, 0, all.data(), all.size(), out);
  }
  nodeBroadcast(c, all.data(), packed * es, [&](std::size_t from, const char* src, std::size_t len) {
    unpackRange(order, op, from, src, len, out);
  });
}

}  // namespace zrt::comm
