#include "comm/mpi/peer_liveness.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>

#include "comm/mpi/left_peers.h"
#include "comm/mpi/peer_sockets.h"
#include "comm/mpi_check.h"
#include "core/log.h"

namespace zrt::comm {
namespace {

// The setup's two bounded waits (peer_sockets.h): making the TCP connections (a peer that drops
// them silently costs this much, once per communicator, with a warning), then the handshakes.
constexpr auto kConnectTimeout = std::chrono::seconds(3);
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
constexpr std::size_t kFailuresNamed = 8;

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

bool peerExited(int fd, PeerWatch kind) noexcept {
  switch (kind) {
    case PeerWatch::Pidfd:
      return pidfdExited(fd);
    case PeerWatch::Socket:
      return peerSocketExited(fd);
    default:
      return false;
  }
}

PeerLiveness::PeerLiveness(MPI_Comm comm) {
  int size = 1;
  ZRT_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  ZRT_CHECK_MPI(MPI_Comm_size(comm, &size));
  Identity me{};
  me.pid = ::getpid();
  me.pidNamespace = pidNamespace();
  if (::gethostname(me.host, sizeof me.host - 1) != 0) me.host[0] = '\0';
  std::vector<Identity> all(static_cast<std::size_t>(size));
  ZRT_CHECK_MPI(MPI_Allgather(&me, sizeof me, MPI_BYTE, all.data(), sizeof me, MPI_BYTE, comm));
  pids_.resize(all.size());
  hosts_.resize(all.size());
  fds_.resize(all.size());
  kinds_.assign(all.size(), PeerWatch::None);
  // A pidfd can watch a peer only on this host and in this PID namespace; both relations are
  // symmetric, so whether any pair needs a connection is the same answer on every rank.
  auto sameProcessSpace = [&](std::size_t r) {
    return all[r].pidNamespace == me.pidNamespace &&
           std::strncmp(all[r].host, me.host, sizeof me.host) == 0;
  };
  bool anySocket = false;
  int failed = 0, lastErrno = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    pids_[r] = static_cast<pid_t>(all[r].pid);
    hosts_[r].assign(all[r].host, ::strnlen(all[r].host, sizeof all[r].host));
    anySocket = anySocket || all[r].pidNamespace != all[0].pidNamespace ||
                std::strncmp(all[r].host, all[0].host, sizeof me.host) != 0;
    if (static_cast<int>(r) == rank_ || !sameProcessSpace(r)) continue;
    const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(all[r].pid), 0);
    if (fd >= 0) {
      fds_[r] = UniqueFd(static_cast<int>(fd));
      kinds_[r] = PeerWatch::Pidfd;
    } else {
      ++failed;
      lastErrno = errno;
    }
  }
  if (failed > 0)
    warnOnce("comm-pidfd",
             detail::cat("comm: cannot watch ", failed, " peer process(es) on this host through pidfd_open (",
                         std::strerror(lastErrno), "); a peer that dies shows only as a collective timeout"));
  if (!anySocket) return;

  // Peers elsewhere: a connection to each (peer_sockets.h). A rank that cannot listen publishes
  // port 0 and takes no part; the collectives below are still made by every rank.
  std::unique_ptr<LivenessListener> listener;
  LivenessEndpoint mine{};
  try {
    listener = std::make_unique<LivenessListener>();
    mine = listener->endpoint();
  } catch (const Error& e) {
    warnOnce("comm-liveness-listen",
             detail::cat("comm: cannot watch peers on other hosts: ", e.what(),
                         "; a peer that dies there shows only as a collective timeout"));
  }
  std::vector<LivenessEndpoint> endpoints(all.size());
  ZRT_CHECK_MPI(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, endpoints.data(), sizeof mine, MPI_BYTE, comm));
  std::vector<LivenessPeer> peers;
  std::vector<int> peerRanks;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (static_cast<int>(r) == rank_ || sameProcessSpace(r) || !listener || endpoints[r].port == 0)
      continue;
    peers.push_back({static_cast<int>(r), hosts_[r], endpoints[r]});
    peerRanks.push_back(static_cast<int>(r));
  }
  std::unique_ptr<LivenessSetup> setup;
  if (listener) {
    setup = std::make_unique<LivenessSetup>(*listener, rank_, peers);
    setup->connect(kConnectTimeout);
  }
  // Tells each higher-ranked peer whether to expect this rank's connection, so that no rank waits
  // for one that was never made.
  std::vector<int> madeTo(all.size(), 0), madeFrom(all.size(), 0);
  for (std::size_t i = 0; i < peers.size(); ++i)
    madeTo[static_cast<std::size_t>(peerRanks[i])] = setup->connected(i);
  ZRT_CHECK_MPI(MPI_Alltoall(madeTo.data(), 1, MPI_INT, madeFrom.data(), 1, MPI_INT, comm));
  if (!setup) return;
  std::vector<bool> announced(peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i)
    announced[i] = madeFrom[static_cast<std::size_t>(peerRanks[i])] != 0;
  LivenessLinks links = setup->handshake(announced, kHandshakeTimeout);
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (!links.fds[i]) continue;
    fds_[static_cast<std::size_t>(peerRanks[i])] = std::move(links.fds[i]);
    kinds_[static_cast<std::size_t>(peerRanks[i])] = PeerWatch::Socket;
  }
  if (!links.failures.empty()) {
    std::string named;
    for (std::size_t i = 0; i < links.failures.size() && i < kFailuresNamed; ++i)
      named += detail::cat(i == 0 ? "" : "; ", links.failures[i]);
    if (links.failures.size() > kFailuresNamed)
      named += detail::cat("; and ", links.failures.size() - kFailuresNamed, " more");
    warnOnce("comm-liveness-connect",
             detail::cat("comm: cannot watch ", links.failures.size(),
                         " peer(s) on other hosts over TCP: ", named,
                         "; a peer that dies there shows only as a collective timeout"));
  }
}

PeerLiveness::~PeerLiveness() {
  // While an exception unwinds the process, its peers must learn of its exit, not of this
  // teardown: the connections stay open until the process ends (left_peers.h).
  const bool unwinding = std::uncaught_exceptions() > 0 || leftPeers();
  for (std::size_t r = 0; r < fds_.size(); ++r) {
    if (kinds_[r] != PeerWatch::Socket) continue;
    if (unwinding) {
      (void)fds_[r].release();
    } else {
      sayGoodbye(fds_[r].get());
    }
  }
}

int PeerLiveness::watched() const {
  int n = 0;
  for (PeerWatch k : kinds_) n += k != PeerWatch::None ? 1 : 0;
  return n;
}

int PeerLiveness::watchedOnOtherHosts() const {
  int n = 0;
  for (int r = 0; r < size(); ++r)
    n += kinds_[static_cast<std::size_t>(r)] != PeerWatch::None && otherHost(r) ? 1 : 0;
  return n;
}

std::vector<int> PeerLiveness::exited() const {
  std::vector<int> out;
  for (std::size_t r = 0; r < fds_.size(); ++r)
    if (peerExited(fds_[r].get(), kinds_[r])) out.push_back(static_cast<int>(r));
  return out;
}

}  // namespace zrt::comm
