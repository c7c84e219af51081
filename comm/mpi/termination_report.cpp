#include "comm/mpi/termination_report.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>

#include "comm/mpi/peer_liveness.h"
#include "core/error.h"
#include "core/termination.h"

namespace zrt::comm {
namespace {

constexpr int kSlots = 32;
constexpr int kMaxPeers = 256;  // peers watched per communicator; more are counted as not watched
constexpr std::size_t kDescription = 192;
constexpr std::size_t kHost = 64;  // as PeerLiveness shares host names

enum SlotState : int { kFree = 0, kWriting = 1, kActive = 2 };

// Registration follows the cleanup registry's seqlock (offload/cleanup_registry.cpp): fields are
// written, then `generation` bumped and `state` set active; a reader checks both afterwards.
// publish() is a second seqlock on `version` (odd while writing), since the watchdog rewrites
// the operation while a handler may read it.
struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<unsigned> generation{0};
  std::atomic<int> worldRank{-1};
  std::atomic<int> peers{0};
  std::atomic<int> otherHosts{0};  // of the watched peers
  std::atomic<int> unwatched{0};
  std::array<std::atomic<int>, kMaxPeers> fd{};
  std::array<std::atomic<unsigned char>, kMaxPeers> kind{};            // PeerWatch
  std::array<std::array<std::atomic<char>, kHost>, kMaxPeers> host{};  // empty: this host
  std::array<std::atomic<int>, kMaxPeers> rank{};
  std::array<std::atomic<long>, kMaxPeers> pid{};
  std::atomic<bool> reported{false};

  std::atomic<unsigned> version{0};
  std::atomic<bool> running{false};
  std::atomic<std::uint64_t> seq{0}, completed{0}, bytes{0};
  std::atomic<std::int64_t> sinceNs{0};  // CLOCK_MONOTONIC, as steady_clock on Linux
  std::array<std::atomic<char>, kDescription> description{};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<long>::is_always_lock_free &&
              std::atomic<char>::is_always_lock_free, "the signal handler may only touch lock-free atomics");

std::array<Slot, kSlots> gSlots;
// A lost peer is reported once per process, whichever communicator saw it first: the watchdog of
// one, or the signal-time report. Without it a process with several communicators printed the
// same "peer lost" sentence once from a watchdog and again, for an idle communicator, at SIGTERM.
std::atomic<bool> gLossReported{false};

std::int64_t monotonicNs() noexcept {
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

const char* signalName(int sig) noexcept {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

// Writes the slot's line, if it has one: a wait in progress (pass 0), or a lost peer while idle
// (pass 1, only when no wait was reported: that line names the lost peers already). The lost
// peers are named on the first line only (`named` records it); a later wait says what it waited
// in. Returns whether it wrote.
bool reportSlot(Slot& slot, int sig, int pass, bool& named) noexcept {
  const unsigned generation = slot.generation.load(std::memory_order_acquire);
  if (slot.reported.load(std::memory_order_acquire)) return false;
  // The operation, read consistently: a few tries (the handler may have interrupted publish()
  // on this very thread, in which case it never finishes: then the text may be torn).
  bool running = false;
  std::uint64_t seq = 0, completed = 0, bytes = 0;
  std::int64_t since = 0;
  char description[kDescription];
  for (int attempt = 0; attempt < 4; ++attempt) {
    const unsigned v1 = slot.version.load(std::memory_order_acquire);
    running = slot.running.load(std::memory_order_relaxed);
    seq = slot.seq.load(std::memory_order_relaxed);
    completed = slot.completed.load(std::memory_order_relaxed);
    bytes = slot.bytes.load(std::memory_order_relaxed);
    since = slot.sinceNs.load(std::memory_order_relaxed);
    std::size_t i = 0;
    for (; i + 1 < kDescription; ++i) {
      description[i] = slot.description[i].load(std::memory_order_relaxed);
      if (description[i] == '\0') break;
    }
    description[i] = '\0';
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((v1 & 1) == 0 && slot.version.load(std::memory_order_relaxed) == v1) break;
  }
  int lostRanks[kMaxPeers];
  long lostPids[kMaxPeers];
  // Host names are copied only for the lost peers, which are few: the stack stays small.
  constexpr int kHostsNamed = 8;
  char lostHostText[kHostsNamed][kHost];
  const char* lostHosts[kMaxPeers];
  int lost = 0;
  const int peers = slot.peers.load(std::memory_order_relaxed);
  for (int p = 0; p < peers && p < kMaxPeers; ++p) {
    const auto u = static_cast<std::size_t>(p);
    const auto kind = static_cast<PeerWatch>(slot.kind[u].load(std::memory_order_relaxed));
    if (!peerExited(slot.fd[u].load(std::memory_order_relaxed), kind)) continue;
    lostRanks[lost] = slot.rank[u].load(std::memory_order_relaxed);
    lostPids[lost] = slot.pid[u].load(std::memory_order_relaxed);
    lostHosts[lost] = nullptr;
    if (lost < kHostsNamed) {
      std::size_t i = 0;
      for (; i + 1 < kHost; ++i) {
        lostHostText[lost][i] = slot.host[u][i].load(std::memory_order_relaxed);
        if (lostHostText[lost][i] == '\0') break;
      }
      lostHostText[lost][i] = '\0';
      lostHosts[lost] = lostHostText[lost];
    }
    ++lost;
  }
  const int unwatched = slot.unwatched.load(std::memory_order_relaxed);
  const int otherHosts = slot.otherHosts.load(std::memory_order_relaxed);
  const int worldRank = slot.worldRank.load(std::memory_order_relaxed);
  if (slot.state.load(std::memory_order_acquire) != kActive || slot.generation.load(std::memory_order_relaxed) != generation)
    return false;  // unregistered meanwhile
  if (pass == 0 ? !running : (running || lost == 0)) return false;

  SignalSafeText t;
  t.add("[zrt rank ").add(static_cast<std::uint64_t>(worldRank)).add("] error: ");
  const double waited = static_cast<double>(monotonicNs() - since) / 1e9;
  if (lost > 0 && named) {
    t.add("also waiting ").addSeconds(waited).add(" s in ").add(description).add(" (").add(bytes);
    t.add(" bytes) on another communicator; ended by ").add(signalName(sig));
  } else if (lost > 0) {
    describeLostPeers(t, lostRanks, lostPids, lostHosts, lost, running, description, bytes, waited,
                      completed);
    t.add("; ended by ").add(signalName(sig));
    named = true;
    gLossReported.store(true, std::memory_order_release);
  } else {
    t.add("ended by ").add(signalName(sig)).add(" while waiting ").addSeconds(waited).add(" s in ");
    t.add(description).add(" (").add(bytes).add(" bytes); no exited peer among the ");
    t.add(static_cast<std::uint64_t>(peers - otherHosts)).add(" watched on this host");
    if (otherHosts > 0)
      t.add(" and the ").add(static_cast<std::uint64_t>(otherHosts)).add(" on other hosts");
    if (unwatched > 0) t.add(" (").add(static_cast<std::uint64_t>(unwatched)).add(" not watched)");
  }
  (void)seq;
  t.add("\n");
  const ssize_t ignored = ::write(STDERR_FILENO, t.data, t.size);
  (void)ignored;
  return true;
}

void reportAll(int sig) noexcept {
  if (sig == 0) return;  // a deliberate abort: the caller has reported already
  if (gLossReported.load(std::memory_order_acquire)) return;  // a watchdog said it already
  bool waits = false, named = false;
  for (Slot& slot : gSlots)
    if (slot.state.load(std::memory_order_acquire) == kActive) waits = reportSlot(slot, sig, 0, named) || waits;
  if (waits) return;
  for (Slot& slot : gSlots)
    if (slot.state.load(std::memory_order_acquire) == kActive && reportSlot(slot, sig, 1, named)) return;
}

}  // namespace

SignalSafeText& SignalSafeText::add(const char* s) noexcept {
  for (; *s != '\0' && size + 1 < sizeof data; ++s) data[size++] = *s;
  data[size] = '\0';
  return *this;
}

SignalSafeText& SignalSafeText::add(std::uint64_t v) noexcept {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  char s[24];
  for (int i = 0; i < n; ++i) s[i] = digits[n - 1 - i];
  s[n] = '\0';
  return add(s);
}

SignalSafeText& SignalSafeText::addSeconds(double s) noexcept {
  if (!(s >= 0)) s = 0;
  const auto tenths = static_cast<std::uint64_t>(s * 10 + 0.5);
  add(tenths / 10).add(".");
  return add(tenths % 10);
}

void describeLostPeers(SignalSafeText& out, const int* ranks, const long* pids,
                       const char* const* hosts, int lost, bool running, const char* operation,
                       std::uint64_t bytes, double waitedSeconds,
                       std::uint64_t completed) noexcept {
  out.add(lost == 1 ? "peer lost: " : "peers lost: ");
  for (int i = 0; i < lost; ++i) {
    if (i > 0) out.add(", ");
    out.add("rank ")
        .add(static_cast<std::uint64_t>(ranks[i]))
        .add(" (pid ")
        .add(static_cast<std::uint64_t>(pids[i]));
    if (hosts != nullptr && hosts[i] != nullptr && hosts[i][0] != '\0')
      out.add(" on host ").add(hosts[i]);
    out.add(")");
  }
  out.add(" exited");
  if (running) {
    out.add(" while this rank waited ").addSeconds(waitedSeconds).add(" s in ").add(operation);
    out.add(" (").add(bytes).add(" bytes)");
  } else {
    out.add("; this rank was not in a collective (").add(completed).add(" finished)");
  }
}

TerminationReportSlot::TerminationReportSlot(const PeerLiveness& peers, const std::vector<int>& worldRanks) {
  addTerminationHook(TerminationPhase::Report, reportAll);
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    Slot& s = gSlots[static_cast<std::size_t>(i)];
    if (!s.state.compare_exchange_strong(expected, kWriting)) continue;
    int n = 0, unwatched = 0, otherHosts = 0;
    const int self = peers.rank();
    for (int r = 0; r < peers.size(); ++r) {
      if (r == self) continue;
      if (peers.watch(r) == PeerWatch::None || n == kMaxPeers) {
        ++unwatched;
        continue;
      }
      const auto u = static_cast<std::size_t>(n);
      s.fd[u].store(peers.watchFd(r), std::memory_order_relaxed);
      s.kind[u].store(static_cast<unsigned char>(peers.watch(r)), std::memory_order_relaxed);
      s.rank[u].store(worldRanks[static_cast<std::size_t>(r)], std::memory_order_relaxed);
      s.pid[u].store(static_cast<long>(peers.pid(r)), std::memory_order_relaxed);
      const std::string& host = peers.otherHost(r) ? peers.host(r) : std::string();
      std::size_t i = 0;
      for (; i < host.size() && i + 1 < kHost; ++i)
        s.host[u][i].store(host[i], std::memory_order_relaxed);
      s.host[u][i].store('\0', std::memory_order_relaxed);
      otherHosts += peers.otherHost(r) ? 1 : 0;
      ++n;
    }
    s.peers.store(n, std::memory_order_relaxed);
    s.otherHosts.store(otherHosts, std::memory_order_relaxed);
    s.unwatched.store(unwatched, std::memory_order_relaxed);
    s.worldRank.store(worldRanks[static_cast<std::size_t>(self)], std::memory_order_relaxed);
    s.reported.store(false, std::memory_order_relaxed);
    s.running.store(false, std::memory_order_relaxed);
    s.description[0].store('\0', std::memory_order_relaxed);
    s.generation.fetch_add(1, std::memory_order_release);
    s.state.store(kActive, std::memory_order_release);
    slot_ = i;
    return;
  }
  // No slot: this communicator stays out of the signal-time report (the watchdog still works).
}

TerminationReportSlot::~TerminationReportSlot() {
  if (slot_ < 0) return;
  Slot& s = gSlots[static_cast<std::size_t>(slot_)];
  s.generation.fetch_add(1, std::memory_order_acq_rel);
  s.state.store(kFree, std::memory_order_release);
}

void TerminationReportSlot::publish(bool running, std::uint64_t seq, std::uint64_t completed,
                                    const std::string& description, std::uint64_t bytes,
                                    std::chrono::steady_clock::time_point since) noexcept {
  if (slot_ < 0) return;
  Slot& s = gSlots[static_cast<std::size_t>(slot_)];
  // Seqlock writer: the odd version is ordered before the fields by the release fence.
  s.version.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.running.store(running, std::memory_order_relaxed);
  s.seq.store(seq, std::memory_order_relaxed);
  s.completed.store(completed, std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.sinceNs.store(std::chrono::duration_cast<std::chrono::nanoseconds>(since.time_since_epoch()).count(),
                  std::memory_order_relaxed);
  std::size_t i = 0;
  for (; i < description.size() && i + 1 < kDescription; ++i)
    s.description[i].store(description[i], std::memory_order_relaxed);
  s.description[i].store('\0', std::memory_order_relaxed);
  s.version.fetch_add(1, std::memory_order_release);  // even: consistent
}

void TerminationReportSlot::markReported() noexcept {
  if (slot_ >= 0) gSlots[static_cast<std::size_t>(slot_)].reported.store(true, std::memory_order_release);
}

bool TerminationReportSlot::claimLossReport() noexcept {
  markReported();
  return !gLossReported.exchange(true, std::memory_order_acq_rel);
}

}  // namespace zrt::comm
