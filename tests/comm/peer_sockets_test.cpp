// Liveness over TCP (comm/mpi/peer_sockets.h) without MPI: two ends set up as two ranks would,
// over loopback. A forked child holding one end is SIGKILLed: the other end must see the exit at
// once; a child that closes in an orderly way (goodbye) must not be taken for an exit; a peer
// that does not listen, or presents a wrong token, is reported by rank, host and port, within the
// setup's bound, and never watched.
#include "comm/mpi/peer_sockets.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

using namespace zrt::comm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// The listener's endpoint, reachable over loopback whatever interfaces the machine has.
LivenessEndpoint overLoopback(const LivenessListener& l) {
  LivenessEndpoint e = l.endpoint();
  e.count = 1;
  e.addresses[0] = htonl(INADDR_LOOPBACK);
  return e;
}

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { REQUIRE(::pipe2(fd, O_CLOEXEC) == 0); }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void put(char c) const { REQUIRE(::write(fd[1], &c, 1) == 1); }
  char get() const {
    char c = 0;
    return ::read(fd[0], &c, 1) == 1 ? c : '\0';
  }
};

enum class ChildEnd { Killed, Goodbye };

// Rank 0 (this process) connects to rank 1 (a forked child, "host b"); the child then holds its
// end until killed, or says goodbye and exits. Returns the child's pid and rank 0's end.
std::pair<pid_t, UniqueFd> linkToChild(ChildEnd end, const Pipe& toChild, const Pipe& fromChild) {
  auto a = std::make_unique<LivenessListener>();
  auto b = std::make_unique<LivenessListener>();
  const LivenessEndpoint ea = overLoopback(*a), eb = overLoopback(*b);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child: rank 1. No doctest macros here; the exit status says what went wrong.
    a.reset();
    LivenessSetup setup(*b, 1, {{0, "host-a", ea}});
    setup.connect(2s);
    const bool announced = toChild.get() == '1';
    LivenessLinks links = setup.handshake({announced}, 5s);
    if (!links.fds[0]) ::_exit(3);
    fromChild.put('r');
    if (end == ChildEnd::Goodbye) {
      (void)toChild.get();  // rank 0 has looked once
      sayGoodbye(links.fds[0].get());
      links.fds[0].reset();
      ::_exit(0);
    }
    ::pause();  // until SIGKILL
    ::_exit(4);
  }
  b.reset();
  LivenessSetup setup(*a, 0, {{1, "host-b", eb}});
  setup.connect(2s);
  CHECK(setup.connected(0));
  toChild.put(setup.connected(0) ? '1' : '0');
  LivenessLinks links = setup.handshake({false}, 5s);
  CHECK(links.failures.empty());
  REQUIRE(links.fds.size() == 1);
  CHECK(fromChild.get() == 'r');
  return {child, std::move(links.fds[0])};
}

// Polls `fd` until it shows the peer's exit; the time it took, or -1 ms after `limit`.
std::chrono::milliseconds timeToExit(int fd, std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  while (Clock::now() - start < limit) {
    if (peerSocketExited(fd))
      return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::this_thread::sleep_for(1ms);
  }
  return -1ms;
}

}  // namespace

TEST_CASE("a peer process SIGKILLed shows as exited on its liveness connection at once") {
  Pipe toChild, fromChild;
  auto [child, fd] = linkToChild(ChildEnd::Killed, toChild, fromChild);
  REQUIRE(fd);
  CHECK_FALSE(peerSocketExited(fd.get()));
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(peerSocketExited(fd.get()));  // idle, alive: nothing arrives
  REQUIRE(::kill(child, SIGKILL) == 0);
  const auto took = timeToExit(fd.get(), 2000ms);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  INFO("detected after ", took.count(), " ms");
  CHECK(took >= 0ms);
  CHECK(took < 500ms);
  CHECK(peerSocketExited(fd.get()));  // and it stays so: peeking consumes nothing
  CHECK_FALSE(peerSocketExited(-1));
}

TEST_CASE("a peer that closes its end with a goodbye is not taken for an exit") {
  Pipe toChild, fromChild;
  auto [child, fd] = linkToChild(ChildEnd::Goodbye, toChild, fromChild);
  REQUIRE(fd);
  CHECK_FALSE(peerSocketExited(fd.get()));
  toChild.put('g');
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::this_thread::sleep_for(50ms);  // the goodbye and the end of file have arrived
  CHECK_FALSE(peerSocketExited(fd.get()));
}

TEST_CASE("a peer that does not listen is reported by rank, host and port, and not watched") {
  auto a = std::make_unique<LivenessListener>();
  auto gone = std::make_unique<LivenessListener>();
  const LivenessEndpoint e = overLoopback(*gone);
  gone.reset();  // nothing listens on its port now
  LivenessSetup setup(*a, 0, {{1, "host-b", e}});
  const auto start = Clock::now();
  setup.connect(2s);
  CHECK_FALSE(setup.connected(0));
  const LivenessLinks links = setup.handshake({false}, 2s);
  CHECK(Clock::now() - start < 1s);  // refused at once: no bound waited out
  REQUIRE(links.failures.size() == 1);
  const std::string port = std::to_string(e.port);
  CHECK(links.failures[0] == "rank 1 (host host-b, port " + port +
                                 "): connect to 127.0.0.1:" + port + ": Connection refused");
  CHECK_FALSE(links.fds[0]);
}

TEST_CASE(
    "a peer that published no address is reported, and one that never connects is waited for only "
    "as announced") {
  LivenessListener a;
  LivenessEndpoint none = a.endpoint();
  none.count = 0;
  LivenessSetup up(a, 0, {{1, "host-b", none}});
  up.connect(1s);
  LivenessLinks links = up.handshake({false}, 1s);
  REQUIRE(links.failures.size() == 1);
  CHECK(links.failures[0] == "rank 1 (host host-b, port " + std::to_string(none.port) +
                                 "): it published no IPv4 address");
  // The lower rank did not announce a connection: the higher one does not wait for it.
  LivenessSetup down(a, 1, {{0, "host-a", none}});
  down.connect(1s);
  const auto start = Clock::now();
  links = down.handshake({false}, 5s);
  CHECK(Clock::now() - start < 1s);
  REQUIRE(links.failures.size() == 1);
  CHECK(links.failures[0].find("it could not connect to this rank") != std::string::npos);
}

TEST_CASE("a connection with a wrong token is refused by both ends within the bound") {
  LivenessListener a, b;
  LivenessEndpoint eb = overLoopback(b);
  eb.token ^= 1;  // rank 0 believes a different token: not the process it meant
  LivenessLinks fromA, fromB;
  std::thread rankB([&] {
    LivenessSetup setup(b, 1, {{0, "host-a", overLoopback(a)}});
    setup.connect(1s);
    fromB = setup.handshake({true}, 1s);
  });
  LivenessSetup setup(a, 0, {{1, "host-b", eb}});
  setup.connect(1s);
  CHECK(setup.connected(0));
  fromA = setup.handshake({false}, 2s);
  rankB.join();
  CHECK_FALSE(fromA.fds[0]);
  CHECK_FALSE(fromB.fds[0]);
  REQUIRE(fromA.failures.size() == 1);
  CHECK(fromA.failures[0].find("closed without an answer") != std::string::npos);
  REQUIRE(fromB.failures.size() == 1);
  CHECK(fromB.failures[0] == "rank 0 (host host-a, port " + std::to_string(a.endpoint().port) +
                                 "): no handshake arrived within 1 s");
}
