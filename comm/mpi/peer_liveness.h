// PeerLiveness: which ranks of a communicator have exited, as this process can see it. At
// construction (collective) every rank shares its pid, PID namespace and host name; each peer on
// this host and in this PID namespace is then watched through a pidfd (pidfd_open), which turns
// readable the moment the process exits, whether killed by SIGKILL or not and whatever its
// parent does with it. Peers on other hosts are not watched: their loss shows as a collective
// timeout, or the launcher ends the job.
// Thread-safety: const methods from any thread; exitedSignalSafe() from a signal handler too.
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace zrt::comm {

class PeerLiveness {
 public:
  explicit PeerLiveness(MPI_Comm comm);  // collective
  ~PeerLiveness();                       // closes the pidfds
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  int size() const { return static_cast<int>(pids_.size()); }
  pid_t pid(int rank) const { return pids_[static_cast<std::size_t>(rank)]; }
  // The host name `rank` reported (gethostname; empty where that failed).
  const std::string& host(int rank) const { return hosts_[static_cast<std::size_t>(rank)]; }
  // Peers watched through a pidfd, and peers that could not be (other hosts, or no pidfd).
  int watched() const;
  int unwatched() const { return size() - 1 - watched(); }
  // The watched ranks whose process has exited, in rank order.
  std::vector<int> exited() const;
  // The pidfd watching `rank`, or -1 (for callers that must copy them: the signal-time report).
  int pidfd(int rank) const { return fds_[static_cast<std::size_t>(rank)]; }

 private:
  std::vector<pid_t> pids_;
  std::vector<std::string> hosts_;
  std::vector<int> fds_;  // -1: not watched (this rank, another host, or pidfd_open failed)
};

// Whether the process behind `pidfd` has exited (poll(2) reports it readable); false for -1.
// Async-signal-safe.
bool pidfdExited(int pidfd) noexcept;

}  // namespace zrt::comm
