// Peer loss as an error instead of the end of the job (CommOptions::raiseOnPeerLoss, which the
// Python package sets). By default a watchdog that sees a peer exit while an operation waits for
// it ends the job with MPI_Abort: a thread blocked inside an MPI call cannot be unwound. In raise
// mode the MPI call is left blocked on the progress thread instead: the waits on it and on the
// operations queued behind it fail with a PeerError naming the lost rank, later posts fail at
// once, and the process is marked here as having lost its peers, so that nothing afterwards
// waits for them: collective frees are skipped (left_peers.h), MPI_Finalize is skipped
// (mpi_env.h), and a communicator destroyed afterwards leaves its progress thread in the call.
// The process is expected to end soon after (the Python package ends it with the error).
// Thread-safety: any thread.
#pragma once

#include <string>

namespace zrt::comm {

// Marks the process as having lost a peer; `report` is the watchdog's "peer lost: rank R ..."
// text (the first one is kept).
void notePeerLoss(const std::string& report);

// Whether a peer loss was noted in this process (a lock-free read).
bool peerLost() noexcept;

// The first report noted; empty when none.
std::string peerLossReport();

}  // namespace zrt::comm
