// MPI collectives over size_t element counts. MPI's counts and displacements are ints (and Open
// MPI sums per-rank counts in an int), so ZRT never hands MPI a number above maxCount (INT_MAX
// by default; tests lower it to exercise the split on small buffers):
//   all-reduce, broadcast   consecutive pieces of at most maxCount elements;
//   reduce-scatter          one MPI_Reduce_scatter(_block) when every count and their sum fit,
//                           else one MPI_Reduce per piece of each rank's segment, rooted at it;
//   all-gather              one MPI_Allgather(v) when every count, displacement and the sum fit,
//                           else one MPI_Bcast per piece of each rank's contribution.
// Plain functions; each is collective over t.comm and called by one thread at a time per comm.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <span>
#include <vector>

namespace zrt::comm {

// What a call needs besides its buffers.
struct MpiTarget {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  std::size_t elemBytes = 1;
  std::size_t maxCount = INT_MAX;  // elements one MPI call may carry (1..INT_MAX)
};

// In place when send == recv.
void mpiAllReduce(const MpiTarget& t, MPI_Op op, const void* send, void* recv, std::size_t count);
void mpiBroadcast(const MpiTarget& t, void* buf, std::size_t count, int root);
// send holds every rank's segment back to back (counts[r] elements each); this rank's sum lands
// in recv, which may be its own segment of send (in place: the other segments stay untouched).
// `scratch` is reused between calls for the in-place case.
void mpiReduceScatter(const MpiTarget& t, MPI_Op op, const void* send, void* recv,
                      std::span<const std::size_t> counts, int rank, std::vector<char>& scratch);
// Rank r's counts[r] elements land at recv + displs[r] (elements) on every rank; in place when
// send == recv + displs[rank].
void mpiAllGather(const MpiTarget& t, const void* send, void* recv,
                  std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                  int rank);

}  // namespace zrt::comm
