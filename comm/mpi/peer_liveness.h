// PeerLiveness: which ranks of a communicator have exited, as this process can see it. At
// construction (collective) every rank shares its pid, PID namespace and host name; each peer on
// this host and in this PID namespace is then watched through a pidfd (pidfd_open), which turns
// readable the moment the process exits, whether killed by SIGKILL or not and whatever its
// parent does with it. Each peer on another host (or in another PID namespace) is watched through
// an idle TCP connection instead (peer_sockets.h), which its kernel ends the moment it exits; the
// connections are made only where such peers exist. A peer that cannot be watched either way
// (pidfd_open or the connection failed: a warning says why) shows its loss only as a collective
// timeout, or the launcher ends the job. A link that is cut looks alive: a collective timeout.
// Destruction closes the connections with a goodbye, so peers do not take it for an exit; while
// an exception unwinds the process (comm/mpi/left_peers.h) they are left open instead, so peers
// see the process's exit, not its unwinding, as with a pidfd.
// Thread-safety: const methods from any thread; peerExited() from a signal handler too.
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "comm/mpi/unique_fd.h"

namespace zrt::comm {

enum class PeerWatch : unsigned char { None = 0, Pidfd = 1, Socket = 2 };

class PeerLiveness {
 public:
  explicit PeerLiveness(MPI_Comm comm);  // collective
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  int size() const { return static_cast<int>(pids_.size()); }
  int rank() const { return rank_; }
  pid_t pid(int rank) const { return pids_[static_cast<std::size_t>(rank)]; }
  // The host name `rank` reported (gethostname; empty where that failed).
  const std::string& host(int rank) const { return hosts_[static_cast<std::size_t>(rank)]; }
  // Whether `rank` runs on another host than this rank (by host name).
  bool otherHost(int rank) const { return host(rank) != host(rank_); }
  // Peers watched (through a pidfd or a connection), those of them on other hosts, and the
  // peers that could not be watched.
  int watched() const;
  int watchedOnOtherHosts() const;
  int unwatched() const { return size() - 1 - watched(); }
  // The watched ranks whose process has exited, in rank order.
  std::vector<int> exited() const;
  // How `rank` is watched, and the descriptor that watches it, or -1 (for callers that must copy
  // them: the signal-time report).
  PeerWatch watch(int rank) const { return kinds_[static_cast<std::size_t>(rank)]; }
  int watchFd(int rank) const { return fds_[static_cast<std::size_t>(rank)].get(); }

 private:
  int rank_ = 0;
  std::vector<pid_t> pids_;
  std::vector<std::string> hosts_;
  std::vector<UniqueFd> fds_;  // empty: not watched (this rank, or watching failed)
  std::vector<PeerWatch> kinds_;
};

// Whether the process behind `pidfd` has exited (poll(2) reports it readable); false for -1.
// Async-signal-safe.
bool pidfdExited(int pidfd) noexcept;
// Whether the peer watched through `fd` as `kind` has exited. Async-signal-safe.
bool peerExited(int fd, PeerWatch kind) noexcept;

}  // namespace zrt::comm
