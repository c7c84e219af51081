#include "comm/mpi/peer_sockets.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/sys_check.h"

namespace zrt::comm {
namespace {

using Clock = std::chrono::steady_clock;

// While another address of the peer is left to try, one that does not answer is given up after
// this long (a firewall that drops SYNs would otherwise use the whole setup's bound on it).
constexpr auto kPerAddress = std::chrono::seconds(1);
constexpr std::uint32_t kHelloMagic = 0x4c54525a;  // "ZRTL"
constexpr std::uint32_t kAckMagic = 0x4154525a;    // "ZRTA"
constexpr char kGoodbye = 'q';

// The connecting rank sends {kHelloMagic, its rank, the acceptor's token}; the acceptor answers
// {kAckMagic, its rank, the connector's token}. Both tokens travelled through the communicator's
// allgather, so each answer proves the other end belongs to this job.
struct Handshake {
  std::uint32_t magic = 0;
  std::int32_t rank = -1;
  std::uint64_t token = 0;
};
static_assert(sizeof(Handshake) == 16);

struct Interface {
  std::uint32_t address;  // network order
  std::uint32_t netmask;  // network order
};

// This host's IPv4 interfaces that are up, loopback left out.
std::vector<Interface> localInterfaces() {
  struct ifaddrs* list = nullptr;
  ZRT_CHECK_SYS(::getifaddrs(&list), "listing this host's addresses for peer liveness");
  std::vector<Interface> out;
  for (const struct ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    Interface f{};
    f.address = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    f.netmask = i->ifa_netmask != nullptr
                    ? reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr
                    : 0;
    if ((ntohl(f.address) >> 24) == 127) continue;
    out.push_back(f);
  }
  ::freeifaddrs(list);
  return out;
}

// The peer's addresses in the order to try: first those on a subnet of one of this host's
// interfaces (the link MPI most likely uses too), then the rest, and last those this host has
// itself (a private bridge such as docker0 carries the same address on every host, and reaching
// it from here lands on this host).
std::vector<std::uint32_t> addressesToTry(const LivenessEndpoint& peer,
                                          const std::vector<Interface>& mine) {
  auto rankOf = [&](std::uint32_t a) {
    for (const Interface& f : mine)
      if (f.address == a) return 2;
    for (const Interface& f : mine)
      if (f.netmask != 0 && (f.address & f.netmask) == (a & f.netmask)) return 0;
    return 1;
  };
  std::vector<std::uint32_t> out(
      peer.addresses, peer.addresses + std::min<int>(peer.count, LivenessEndpoint::kMaxAddresses));
  std::stable_sort(out.begin(), out.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return rankOf(a) < rankOf(b); });
  return out;
}

std::string errnoText(int e) { return std::strerror(e); }

long long msUntil(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return std::max<long long>(ms, 0);
}

std::string seconds(std::chrono::milliseconds ms) {
  return detail::cat(static_cast<double>(ms.count()) / 1000.0, " s");
}

}  // namespace

std::string ipv4Text(std::uint32_t address) {
  char text[INET_ADDRSTRLEN] = "";
  struct in_addr a {};
  a.s_addr = address;
  if (::inet_ntop(AF_INET, &a, text, sizeof text) == nullptr) return "?";
  return text;
}

LivenessListener::LivenessListener() {
  fd_ = UniqueFd(ZRT_CHECK_SYS(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                               "the peer-liveness listener"));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = 0;
  ZRT_CHECK_SYS(::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any),
                "the peer-liveness listener on an ephemeral port");
  ZRT_CHECK_SYS(::listen(fd_.get(), SOMAXCONN), "the peer-liveness listener");
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ZRT_CHECK_SYS(::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&bound), &len),
                "the peer-liveness listener");
  endpoint_.port = ntohs(bound.sin_port);
  std::random_device random;
  endpoint_.token = (static_cast<std::uint64_t>(random()) << 32) ^ random();
  for (const Interface& f : localInterfaces()) {
    if (endpoint_.count == LivenessEndpoint::kMaxAddresses) break;
    endpoint_.addresses[endpoint_.count++] = f.address;
  }
}

struct LivenessSetup::Impl {
  enum class State { Idle, Connecting, Sent, Done, Failed };
  struct Outgoing {
    std::size_t peer = 0;
    std::vector<std::uint32_t> addresses;  // in the order to try
    std::size_t next = 0;
    std::uint32_t address = 0;  // being tried
    State state = State::Idle;
    UniqueFd fd;
    Clock::time_point attemptEnd;
    Handshake answer{};
    std::size_t got = 0;
    std::string why;  // the last failure
  };
  struct Incoming {
    UniqueFd fd;
    Handshake hello{};
    std::size_t got = 0;
  };

  const LivenessListener& listener;
  int myRank;
  std::vector<LivenessPeer> peers;
  std::vector<Outgoing> outs;

  std::string where(const Outgoing& o) const {
    return detail::cat(ipv4Text(o.address), ":", peers[o.peer].endpoint.port);
  }
  std::string who(std::size_t peer) const {
    return detail::cat("rank ", peers[peer].rank, " (host ", peers[peer].host, ", port ",
                       peers[peer].endpoint.port, ")");
  }

  void fail(Outgoing& o, std::string why) {
    o.why = std::move(why);
    o.fd.reset();
    o.state = State::Idle;
  }

  void sendHello(Outgoing& o) {
    Handshake h;
    h.magic = kHelloMagic;
    h.rank = myRank;
    h.token = peers[o.peer].endpoint.token;
    const ssize_t n = ::send(o.fd.get(), &h, sizeof h, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof h)) {
      o.state = State::Sent;
      return;
    }
    // A fresh connection's send buffer takes 16 bytes whole; a short write means it broke.
    fail(o, detail::cat("sending the handshake to ", where(o), ": ",
                        n < 0 ? errnoText(errno) : "short write"));
  }

  // Starts a connection to the next address, until one is in progress or none is left.
  void start(Outgoing& o, Clock::time_point deadline) {
    while (o.next < o.addresses.size()) {
      o.address = o.addresses[o.next++];
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        fail(o, detail::cat("socket for ", where(o), ": ", errnoText(errno)));
        continue;
      }
      o.fd = UniqueFd(fd);
      o.attemptEnd =
          o.next < o.addresses.size() ? std::min(Clock::now() + kPerAddress, deadline) : deadline;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(peers[o.peer].endpoint.port);
      a.sin_addr.s_addr = o.address;
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
        sendHello(o);
        if (o.state == State::Sent) return;
        continue;
      }
      if (errno == EINPROGRESS) {
        o.state = State::Connecting;
        return;
      }
      fail(o, detail::cat("connect to ", where(o), ": ", errnoText(errno)));
    }
    if (o.why.empty()) o.why = "it published no IPv4 address";
    o.state = State::Failed;
  }

  void finishConnect(Outgoing& o) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(o.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) return fail(o, detail::cat("connect to ", where(o), ": ", errnoText(err)));
    sendHello(o);
  }
};

LivenessSetup::LivenessSetup(const LivenessListener& listener, int myRank,
                             std::vector<LivenessPeer> peers)
    : impl_(new Impl{listener, myRank, std::move(peers), {}}) {
  const std::vector<Interface> mine = localInterfaces();
  for (std::size_t i = 0; i < impl_->peers.size(); ++i) {
    if (impl_->peers[i].rank < myRank) continue;
    Impl::Outgoing o;
    o.peer = i;
    o.addresses = addressesToTry(impl_->peers[i].endpoint, mine);
    impl_->outs.push_back(std::move(o));
  }
}

LivenessSetup::~LivenessSetup() = default;

void LivenessSetup::connect(std::chrono::milliseconds timeout) {
  using State = Impl::State;
  const auto deadline = Clock::now() + timeout;
  std::vector<struct pollfd> fds;
  std::vector<Impl::Outgoing*> polled;
  for (;;) {
    fds.clear();
    polled.clear();
    auto wake = deadline;
    for (Impl::Outgoing& o : impl_->outs) {
      if (o.state == State::Connecting && Clock::now() >= o.attemptEnd)
        impl_->fail(
            o, detail::cat(
                   "connect to ", impl_->where(o), ": no answer within ",
                   seconds(std::chrono::duration_cast<std::chrono::milliseconds>(kPerAddress))));
      if (o.state == State::Idle) impl_->start(o, deadline);
      if (o.state != State::Connecting) continue;
      fds.push_back({o.fd.get(), POLLOUT, 0});
      polled.push_back(&o);
      wake = std::min(wake, o.attemptEnd);
    }
    if (fds.empty()) return;
    if (Clock::now() >= deadline) break;
    // Waits for connections to complete or fail, at most until the next attempt's end.
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(msUntil(wake)) + 1);
    if (rc < 0 && errno == EINTR) continue;
    ZRT_CHECK_SYS(rc, "waiting for peer-liveness connections");
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents != 0) impl_->finishConnect(*polled[i]);
  }
  for (Impl::Outgoing& o : impl_->outs) {
    if (o.state != State::Connecting) continue;
    o.why = detail::cat("connect to ", impl_->where(o), ": no answer within ", seconds(timeout));
    o.fd.reset();
    o.state = State::Failed;
  }
}

bool LivenessSetup::connected(std::size_t i) const {
  for (const Impl::Outgoing& o : impl_->outs)
    if (o.peer == i) return o.state == Impl::State::Sent;
  return false;
}

LivenessLinks LivenessSetup::handshake(const std::vector<bool>& announced,
                                       std::chrono::milliseconds timeout) {
  using State = Impl::State;
  Impl& m = *impl_;
  LivenessLinks links;
  links.fds.resize(m.peers.size());
  const auto deadline = Clock::now() + timeout;
  std::size_t expected = 0;
  for (std::size_t i = 0; i < m.peers.size(); ++i)
    if (m.peers[i].rank < m.myRank && i < announced.size() && announced[i]) ++expected;
  std::size_t accepted = 0;
  std::vector<Impl::Incoming> ins;
  std::vector<struct pollfd> fds;
  for (;;) {
    bool waiting = accepted < expected;
    for (const Impl::Outgoing& o : m.outs) waiting = waiting || o.state == State::Sent;
    if (!waiting || Clock::now() >= deadline) break;
    fds.clear();
    if (accepted < expected) fds.push_back({m.listener.fd(), POLLIN, 0});
    const std::size_t firstIn = fds.size();
    for (const Impl::Incoming& in : ins) fds.push_back({in.fd.get(), POLLIN, 0});
    const std::size_t firstOut = fds.size();
    std::vector<Impl::Outgoing*> polled;
    for (Impl::Outgoing& o : m.outs) {
      if (o.state != State::Sent) continue;
      fds.push_back({o.fd.get(), POLLIN, 0});
      polled.push_back(&o);
    }
    // Waits for announced peers to connect and send their hello, and for the answers to ours.
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(msUntil(deadline)) + 1);
    if (rc < 0 && errno == EINTR) continue;
    ZRT_CHECK_SYS(rc, "waiting for peer-liveness handshakes");
    // Answers to this rank's hellos.
    for (std::size_t k = 0; k < polled.size(); ++k) {
      if (fds[firstOut + k].revents == 0) continue;
      Impl::Outgoing& o = *polled[k];
      const ssize_t n = ::recv(o.fd.get(), reinterpret_cast<char*>(&o.answer) + o.got,
                               sizeof o.answer - o.got, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        o.why = detail::cat(
            "the handshake with ", m.where(o), ": ",
            n == 0 ? "closed without an answer (not a rank of this job?)" : errnoText(errno));
        o.fd.reset();
        o.state = State::Failed;
        continue;
      }
      o.got += static_cast<std::size_t>(n);
      if (o.got < sizeof o.answer) continue;
      if (o.answer.magic != kAckMagic || o.answer.rank != m.peers[o.peer].rank ||
          o.answer.token != m.listener.endpoint().token) {
        o.why = detail::cat("the handshake with ", m.where(o), ": a wrong answer (not rank ",
                            m.peers[o.peer].rank, " of this job)");
        o.fd.reset();
        o.state = State::Failed;
        continue;
      }
      links.fds[o.peer] = std::move(o.fd);
      o.state = State::Done;
    }
    // Hellos from the connections accepted earlier.
    for (std::size_t k = 0; k < ins.size(); ++k) {
      if (fds[firstIn + k].revents == 0) continue;
      Impl::Incoming& in = ins[k];
      const ssize_t n = ::recv(in.fd.get(), reinterpret_cast<char*>(&in.hello) + in.got,
                               sizeof in.hello - in.got, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        in.fd.reset();  // a stray connection, or a peer that gave up: it says why itself
        continue;
      }
      in.got += static_cast<std::size_t>(n);
      if (in.got < sizeof in.hello) continue;
      std::size_t peer = m.peers.size();
      for (std::size_t i = 0; i < m.peers.size(); ++i)
        if (m.peers[i].rank == in.hello.rank && m.peers[i].rank < m.myRank) peer = i;
      if (in.hello.magic != kHelloMagic || in.hello.token != m.listener.endpoint().token ||
          peer == m.peers.size() || links.fds[peer]) {
        in.fd.reset();  // not a peer of this communicator (a wrong token): never watched
        continue;
      }
      Handshake ack;
      ack.magic = kAckMagic;
      ack.rank = m.myRank;
      ack.token = m.peers[peer].endpoint.token;
      if (::send(in.fd.get(), &ack, sizeof ack, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof ack)) {
        in.fd.reset();  // the peer reports the missing answer
        continue;
      }
      links.fds[peer] = std::move(in.fd);
      ++accepted;
    }
    std::erase_if(ins, [](const Impl::Incoming& in) { return !in.fd; });
    // New connections: each must send its hello next.
    if (firstIn == 1 && fds[0].revents != 0) {
      for (;;) {
        const int fd = ::accept4(m.listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          ins.push_back({UniqueFd(fd), {}, 0});
          continue;
        }
        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) break;
        ZRT_CHECK_SYS(fd, "accepting peer-liveness connections on port ",
                      m.listener.endpoint().port);
      }
    }
  }
  for (std::size_t i = 0; i < m.peers.size(); ++i) {
    if (links.fds[i]) {
      if (!peerSocketExited(links.fds[i].get())) continue;
      links.fds[i].reset();
      links.failures.push_back(m.who(i) + ": the connection closed during the setup");
      continue;
    }
    if (m.peers[i].rank < m.myRank) {
      if (i < announced.size() && announced[i])
        links.failures.push_back(m.who(i) + ": no handshake arrived within " + seconds(timeout));
      else
        links.failures.push_back(m.who(i) + ": it could not connect to this rank (it says why)");
      continue;
    }
    for (const Impl::Outgoing& o : m.outs) {
      if (o.peer != i) continue;
      links.failures.push_back(m.who(i) + ": " +
                               (o.state == State::Sent
                                    ? detail::cat("no answer to the handshake with ", m.where(o),
                                                  " within ", seconds(timeout))
                                    : o.why));
    }
  }
  return links;
}

bool peerSocketExited(int fd) noexcept {
  if (fd < 0) return false;
  const int savedErrno = errno;  // a signal handler must leave errno as it found it
  struct pollfd p {};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  bool exited = false;
  if (::poll(&p, 1, 0) == 1) {
    if ((p.revents & (POLLIN | POLLRDHUP)) != 0) {
      char c = 0;
      const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      // A byte before the end is the goodbye of an orderly close; nothing before it, an exit.
      exited = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    } else {
      exited = (p.revents & (POLLHUP | POLLERR)) != 0;
    }
  }
  errno = savedErrno;
  return exited;
}

void sayGoodbye(int fd) noexcept {
  if (fd < 0) return;
  // Best effort: a peer that is gone, or whose buffer is full, needs no goodbye.
  const ssize_t ignored = ::send(fd, &kGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

}  // namespace zrt::comm
