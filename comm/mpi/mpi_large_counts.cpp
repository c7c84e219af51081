#include "comm/mpi/mpi_large_counts.h"

#include <algorithm>
#include <cstring>

#include "comm/mpi_check.h"

namespace zrt::comm {
namespace {

// Whether every value, and (sumMustFit) their running sum, is at most t.maxCount.
bool fits(const MpiTarget& t, std::span<const std::size_t> v, bool sumMustFit) {
  std::size_t total = 0;
  for (std::size_t x : v) {
    if (x > t.maxCount) return false;
    total += sumMustFit ? x : 0;
    if (total > t.maxCount) return false;
  }
  return true;
}

std::vector<int> toInt(std::span<const std::size_t> v) {
  std::vector<int> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<int>(v[i]);
  return out;
}

bool allEqual(std::span<const std::size_t> v) {
  return std::all_of(v.begin(), v.end(), [&](std::size_t x) { return x == v.front(); });
}

// Calls fn(offset, n) for consecutive pieces of [0, count) of at most t.maxCount elements.
template <class Fn>
void forPieces(const MpiTarget& t, std::size_t count, Fn fn) {
  for (std::size_t off = 0; off < count; off += t.maxCount)
    fn(off, static_cast<int>(std::min(t.maxCount, count - off)));
}

}  // namespace

void mpiAllReduce(const MpiTarget& t, MPI_Op op, const void* send, void* recv, std::size_t count) {
  const bool inPlace = send == recv;
  auto* out = static_cast<char*>(recv);
  forPieces(t, count, [&](std::size_t off, int n) {
    ZRT_CHECK_MPI(MPI_Allreduce(inPlace ? MPI_IN_PLACE : static_cast<const char*>(send) + off * t.elemBytes,
                                out + off * t.elemBytes, n, t.type, op, t.comm));
  });
}

void mpiBroadcast(const MpiTarget& t, void* buf, std::size_t count, int root) {
  auto* p = static_cast<char*>(buf);
  forPieces(t, count, [&](std::size_t off, int n) {
    ZRT_CHECK_MPI(MPI_Bcast(p + off * t.elemBytes, n, t.type, root, t.comm));
  });
}

void mpiReduceScatter(const MpiTarget& t, MPI_Op op, const void* send, void* recv,
                      std::span<const std::size_t> counts, int rank, std::vector<char>& scratch) {
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const std::size_t es = t.elemBytes;
  std::vector<std::size_t> offset(counts.size() + 1, 0);
  for (std::size_t r = 0; r < counts.size(); ++r) offset[r + 1] = offset[r] + counts[r];
  const auto me = static_cast<std::size_t>(rank);
  const std::size_t mine = counts[me];
  const bool inPlace = out == in + offset[me] * es;
  if (!fits(t, counts, /*sumMustFit=*/true)) {
    // Too large for one call: each segment's pieces reduced at their owner.
    for (std::size_t r = 0; r < counts.size(); ++r) {
      forPieces(t, counts[r], [&](std::size_t off, int n) {
        const char* seg = in + (offset[r] + off) * es;
        if (r != me)
          ZRT_CHECK_MPI(MPI_Reduce(seg, nullptr, n, t.type, op, static_cast<int>(r), t.comm));
        else
          ZRT_CHECK_MPI(MPI_Reduce(inPlace ? MPI_IN_PLACE : seg, out + off * es, n, t.type, op,
                                   rank, t.comm));
      });
    }
    return;
  }
  if (inPlace && mine > 0) {
    // MPI_IN_PLACE would leave the result at the start of the buffer and may use the rest as
    // workspace; receive into scratch and keep the other segments untouched instead.
    scratch.resize(mine * es);
    ZRT_CHECK_MPI(MPI_Reduce_scatter(in, scratch.data(), toInt(counts).data(), t.type, op, t.comm));
    std::memcpy(out, scratch.data(), mine * es);
  } else if (allEqual(counts)) {
    ZRT_CHECK_MPI(MPI_Reduce_scatter_block(in, out, static_cast<int>(counts.front()), t.type, op,
                                           t.comm));
  } else {
    ZRT_CHECK_MPI(MPI_Reduce_scatter(in, out, toInt(counts).data(), t.type, op, t.comm));
  }
}

void mpiAllGather(const MpiTarget& t, const void* send, void* recv,
                  std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                  int rank) {
  const std::size_t es = t.elemBytes;
  auto* out = static_cast<char*>(recv);
  const auto me = static_cast<std::size_t>(rank);
  const bool inPlace = send == out + displs[me] * es;
  if (!fits(t, counts, /*sumMustFit=*/true) || !fits(t, displs, /*sumMustFit=*/false)) {
    // Too large for one call: each contribution's pieces broadcast by their owner.
    if (!inPlace && counts[me] > 0) std::memcpy(out + displs[me] * es, send, counts[me] * es);
    for (std::size_t r = 0; r < counts.size(); ++r) {
      forPieces(t, counts[r], [&](std::size_t off, int n) {
        ZRT_CHECK_MPI(MPI_Bcast(out + (displs[r] + off) * es, n, t.type, static_cast<int>(r), t.comm));
      });
    }
    return;
  }
  bool packed = allEqual(counts);
  for (std::size_t r = 0; packed && r < counts.size(); ++r) packed = displs[r] == r * counts.front();
  const void* sendArg = inPlace ? MPI_IN_PLACE : send;
  if (packed) {
    const int n = static_cast<int>(counts.front());
    ZRT_CHECK_MPI(MPI_Allgather(sendArg, n, t.type, out, n, t.type, t.comm));
  } else {
    ZRT_CHECK_MPI(MPI_Allgatherv(sendArg, static_cast<int>(counts[me]), t.type, out,
                                 toInt(counts).data(), toInt(displs).data(), t.type, t.comm));
  }
}

}  // namespace zrt::comm
