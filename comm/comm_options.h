// Options of the MPI backend as a plain struct, defaults first, then the environment (read once
// per call of fromEnvironment and logged at info level), then whatever the caller sets. The
// config file's comm timeout (zrt.comm_timeout_s in core/config/config.h) maps to `timeout`.
//
//   ZRT_COMM_PATH            auto | mpi | shm   which algorithm host collectives use
//   ZRT_COMM_TIMEOUT_S       seconds before a collective that has not completed aborts the job
//   ZRT_DIVERGENCE_TIMEOUT_S seconds a peer may spend in no ZRT call while another waits for it
//                            (0: no divergence probe)
//   ZRT_COMM_CHECK           0 | 1   cross-rank check of every operation's kind, type and sizes
//   ZRT_COMM_SHM_BYTES       staging bytes per rank for the shared-memory path
//   ZRT_COMM_SHM_MIN_BYTES   operations smaller than this take the MPI path under auto
//   ZRT_COMM_RANKS_PER_NODE  pretend nodes of this many consecutive ranks (tests the
//                            hierarchical path on one machine); 0 = real nodes
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <climits>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace zrt::comm {

enum class CommPath {
  Auto,  // shared memory inside a node (hierarchical over several nodes) for large operations
  Mpi,   // MPI's own collectives on the whole world
  Shm,   // shared memory inside each node, MPI between node leaders
};
std::string_view nameOf(CommPath path);
CommPath parseCommPath(std::string_view text);  // throws InvalidArgument

// Whether this build of the library checks operations across ranks by default (debug builds).
bool defaultCheckConsistency();

struct CommOptions {
  CommPath path = CommPath::Auto;
  std::chrono::milliseconds timeout{600'000};
  // How long a peer may be in no ZRT call while an operation waits for it before the ranks count
  // as diverged (comm/mpi/watchdog.h); 0 turns the divergence probe off.
  std::chrono::milliseconds divergenceTimeout{6'000};
  // On by default in debug builds of ZRT, off in release builds (one small all-gather per op).
  bool checkConsistency = defaultCheckConsistency();
  std::size_t shmBytes = std::size_t{4} << 20;
  std::size_t shmMinBytes = std::size_t{256} << 10;
  int simulatedRanksPerNode = 0;
  // Elements one MPI call may carry (MPI counts are ints); larger operations are split
  // (comm/mpi/mpi_large_counts.h). Tests lower it to exercise the split on small buffers.
  std::size_t maxMpiCount = INT_MAX;
  // Called on the watchdog's thread with the timeout report; the default logs it and calls
  // MPI_Abort. Tests replace it to observe the report without ending the process.
  std::function<void(const std::string& report)> onTimeout;
  // Called on the watchdog's thread with the report when a peer on this host exits while an
  // operation waits for it ("peer lost: rank 1 (pid 4242) exited while this rank waited ...");
  // the default logs it, runs the termination hooks (swap files) and calls MPI_Abort.
  std::function<void(const std::string& report)> onPeerLost;
  // Without onPeerLost: a peer loss fails the waits with a PeerError instead of ending the job
  // (comm/mpi/peer_loss.h: the blocked MPI call is abandoned and the process should end soon).
  // Blocking calls then never run inline on the caller's thread, which could not be woken.
  bool raiseOnPeerLoss = false;

  // Defaults overridden by the ZRT_COMM_* variables; throws InvalidArgument naming a bad one.
  static CommOptions fromEnvironment();
  // The same, starting from a timeout in seconds (zrt.comm_timeout_s of the config).
  static CommOptions fromEnvironment(double timeoutSeconds);
};

// A positive number of seconds from environment variable `name` (as ZRT_COMM_TIMEOUT_S is
// read), or `fallback` when it is unset; InvalidArgument naming the variable when malformed.
std::chrono::milliseconds secondsFromEnvironment(const char* name, double fallback);
// The same where 0 is allowed (it means off).
std::chrono::milliseconds nonNegativeSecondsFromEnvironment(const char* name, double fallback);

}  // namespace zrt::comm
