#include "comm/mpi/left_peers.h"

#include <atomic>
#include <exception>

#include <mpi.h>

#include "comm/agreed_failure.h"
#include "comm/comm_options.h"
#include "comm/mpi/peer_loss.h"
#include "core/log.h"

namespace zrt::comm {
namespace {
std::atomic<bool> g_left{false};
}  // namespace

bool skipCollectiveTeardown(const char* what) noexcept {
  // A lost peer never joins a collective free (peer_loss.h).
  if (peerLost()) return true;
  if (std::uncaught_exceptions() == 0) return false;
  // A rank alone has no peers to leave: its frees cannot wait for anyone.
  int world = 0;
  if (MPI_Comm_size(MPI_COMM_WORLD, &world) == MPI_SUCCESS && world == 1) return false;
  // Peers that threw the same agreed error are unwinding too: nothing to warn about.
  if (!g_left.exchange(true) && !agreedFailure()) {
    try {
      logWarning(detail::cat("an exception is unwinding this rank while its peers may still be in the "
                             "collectives it left: skipping collective teardown (", what,
                             " and those after it); MPI_Finalize will wait for the peers at most "
                             "ZRT_UNWIND_GRACE_S"));
    } catch (...) {
      // The warning is only help; skipping must not throw from a destructor.
    }
  }
  return true;
}

void leavePeers(const char* why) noexcept {
  int initialized = 0, finalized = 0, world = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  if (MPI_Comm_size(MPI_COMM_WORLD, &world) != MPI_SUCCESS || world == 1) return;
  if (g_left.exchange(true)) return;
  try {
    logWarning(detail::cat(why, ": leaving the peers, which may be waiting for this rank in a "
                           "collective; MPI_Finalize will wait for them at most ZRT_UNWIND_GRACE_S"));
  } catch (...) {
    // The warning is only help; leaving must not throw on the way out.
  }
}

bool leftPeers() noexcept { return g_left.load(); }

std::chrono::milliseconds unwindGrace() { return secondsFromEnvironment("ZRT_UNWIND_GRACE_S", 10); }

}  // namespace zrt::comm
