// Liveness of peers on other hosts, over TCP. A pidfd sees only processes of this host (and PID
// namespace); for the others, each pair of ranks keeps one idle TCP connection. The kernel closes
// a process's sockets the moment it exits, SIGKILL included, and tells the other end at once
// (FIN, or RST), so the connection turning readable with an end of file means the peer is gone.
// A rank that closes its end in an orderly way (its communicator destroyed) first sends one
// byte, so that is not taken for an exit. A link that is cut sends nothing: that loss still shows
// as a collective timeout (comm/mpi/watchdog.h).
// Setup (PeerLiveness's constructor): every rank listens on an ephemeral port of every address
// (INADDR_ANY) and publishes the port, a random token and its non-loopback IPv4 addresses through
// the communicator's allgather; then, for each pair, the lower rank connects (non-blocking, each
// address in turn, all within one bounded wait) and the two exchange a 16-byte handshake, each
// proving it knows the other's token, so a stray process on a reused port is never watched.
// Thread-safety: a LivenessSetup on one thread; peerSocketExited() from any thread or a signal
// handler.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/unique_fd.h"

namespace zrt::comm {

// What a rank publishes so that peers on other hosts can connect to it. Plain bytes (allgather).
struct LivenessEndpoint {
  static constexpr int kMaxAddresses = 8;
  std::uint64_t token = 0;     // a connection must present it; and the answer to one proves it
  std::uint16_t port = 0;      // host order; 0: not listening (no peer of this rank is watched)
  std::uint16_t count = 0;     // addresses in use
  std::uint32_t reserved = 0;  // no padding: every byte sent is initialised
  std::uint32_t addresses[kMaxAddresses]{};  // IPv4, network order
};
static_assert(sizeof(LivenessEndpoint) == 48, "sent as bytes: no padding");

// A listening socket on every address of this host (INADDR_ANY, an ephemeral port), with the
// endpoint to publish. Throws IoError (naming the call) when the socket cannot be made.
class LivenessListener {
 public:
  LivenessListener();
  const LivenessEndpoint& endpoint() const { return endpoint_; }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
  LivenessEndpoint endpoint_;
};

// A peer to connect to (when its rank is higher than this rank's) or accept from (lower).
struct LivenessPeer {
  int rank = -1;     // in the communicator
  std::string host;  // for messages
  LivenessEndpoint endpoint;
};

struct LivenessLinks {
  std::vector<UniqueFd> fds;          // one per peer, in the order given; empty where it failed
  std::vector<std::string> failures;  // one per failed peer: "rank 3 (host b, port 4711): <why>"
};

// The setup in two halves around one exchange, so that no rank waits for a connection that will
// never come: connect() makes the TCP connections to the higher ranks (the kernel's listen queue
// completes them without the peer's help) and sends each the hello; the caller then tells every
// lower peer whether its connection was made (PeerLiveness: MPI_Alltoall); handshake() accepts
// the connections announced to this rank and waits for the answers to its own hellos. Each half
// is bounded by its own timeout.
class LivenessSetup {
 public:
  LivenessSetup(const LivenessListener& listener, int myRank, std::vector<LivenessPeer> peers);
  ~LivenessSetup();
  LivenessSetup(const LivenessSetup&) = delete;
  LivenessSetup& operator=(const LivenessSetup&) = delete;

  void connect(std::chrono::milliseconds timeout);
  // Whether this rank's connection to peer `i` (a higher rank) was made and its hello sent.
  bool connected(std::size_t i) const;
  // `announced[i]`: whether lower-ranked peer i says it connected to this rank. A peer that cannot
  // be reached is reported in the result's failures, not thrown: the caller warns and leaves it
  // to the collective timeout.
  LivenessLinks handshake(const std::vector<bool>& announced, std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether the peer behind a liveness connection has exited: an end of file (or a reset) with no
// goodbye byte before it. False for -1, for a live peer, and after an orderly goodbye.
// Async-signal-safe (poll and recv only).
bool peerSocketExited(int fd) noexcept;

// Sends the goodbye byte before an orderly close (best effort: a peer already gone needs none).
void sayGoodbye(int fd) noexcept;

// "a.b.c.d" for an IPv4 address in network order.
std::string ipv4Text(std::uint32_t address);

}  // namespace zrt::comm
