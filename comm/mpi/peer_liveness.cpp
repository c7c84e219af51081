#include "comm/mpi/peer_liveness.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "comm/mpi_check.h"
#include "core/log.h"

namespace zrt::comm {
namespace {

struct Identity {
  std::int64_t pid;
  std::uint64_t pidNamespace;
  char host[64];
};

std::uint64_t pidNamespace() {
  char link[64] = "";
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  std::uint64_t v = 0;
  for (ssize_t i = 0; i < n; ++i)
    if (link[i] >= '0' && link[i] <= '9') v = v * 10 + static_cast<std::uint64_t>(link[i] - '0');
  return v;
}

}  // namespace

bool pidfdExited(int pidfd) noexcept {
  if (pidfd < 0) return false;
  struct pollfd p {};
  p.fd = pidfd;
  p.events = POLLIN;
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

PeerLiveness::PeerLiveness(MPI_Comm comm) {
  int rank = 0, size = 1;
  ZRT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ZRT_CHECK_MPI(MPI_Comm_size(comm, &size));
  Identity me{};
  me.pid = ::getpid();
  me.pidNamespace = pidNamespace();
  if (::gethostname(me.host, sizeof me.host - 1) != 0) me.host[0] = '\0';
  std::vector<Identity> all(static_cast<std::size_t>(size));
  ZRT_CHECK_MPI(MPI_Allgather(&me, sizeof me, MPI_BYTE, all.data(), sizeof me, MPI_BYTE, comm));
  pids_.resize(all.size());
  hosts_.resize(all.size());
  fds_.assign(all.size(), -1);
  int failed = 0, lastErrno = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    pids_[r] = static_cast<pid_t>(all[r].pid);
    hosts_[r].assign(all[r].host, ::strnlen(all[r].host, sizeof all[r].host));
    if (static_cast<int>(r) == rank || all[r].pidNamespace != me.pidNamespace ||
        std::strncmp(all[r].host, me.host, sizeof me.host) != 0)
      continue;
    const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(all[r].pid), 0);
    if (fd >= 0) {
      fds_[r] = static_cast<int>(fd);
    } else {
      ++failed;
      lastErrno = errno;
    }
  }
  if (failed > 0)
    warnOnce("comm-pidfd",
             detail::cat("comm: cannot watch ", failed, " peer process(es) on this host through pidfd_open (",
                         std::strerror(lastErrno), "); a peer that dies shows only as a collective timeout"));
}

PeerLiveness::~PeerLiveness() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

int PeerLiveness::watched() const {
  int n = 0;
  for (int fd : fds_) n += fd >= 0 ? 1 : 0;
  return n;
}

std::vector<int> PeerLiveness::exited() const {
  std::vector<int> out;
  for (std::size_t r = 0; r < fds_.size(); ++r)
    if (pidfdExited(fds_[r])) out.push_back(static_cast<int>(r));
  return out;
}

}  // namespace zrt::comm
