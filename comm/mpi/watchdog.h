// Watchdog: keeps a communicator from hanging silently. Its thread watches the operation in
// flight on the progress thread; when one has run longer than the timeout it asks every peer's
// watchdog, over a private duplicate of the communicator, how far that peer got (operations
// posted, started, finished, and what it is running), writes a report naming the operation, its
// bytes and the ranks that had not arrived, and hands it to onTimeout (by default: log it, run
// the termination hooks, which remove swap files, and MPI_Abort the job). The same thread
// answers peers' questions, so a rank whose caller is busy or stuck elsewhere still says where
// it is.
// A peer whose process exits (PeerLiveness: a pidfd on this host, a TCP connection to another)
// while an operation waits for it is a lost peer: after a second's grace (an operation it
// finished may still be completing here) the watchdog writes "peer lost: rank R (pid P) exited
// while this rank waited T s in <op>" (with "on host H" for a peer on another host) and
// hands it to onPeerLost (by default: the same log, hooks and MPI_Abort), without waiting for
// the timeout. It also publishes the operation in flight for the signal-time report
// (termination_report.h), which is what a rank prints when mpirun ends it after a peer died.
// Construction and destruction are collective over the communicator.
// Thread-safety: internal; the owner only constructs and destroys it.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/caller_label.h"
#include "comm/mpi/mpi_handles.h"
#include "comm/mpi/peer_liveness.h"
#include "comm/mpi/termination_report.h"
#include "comm/progress_thread.h"

namespace zrt::comm {

class Watchdog {
 public:
  Watchdog(MPI_Comm comm, const ProgressThread& progress, std::chrono::milliseconds timeout,
           std::chrono::milliseconds divergenceTimeout,
           std::function<void(const std::string&)> onTimeout,
           std::function<void(const std::string&)> onPeerLost = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Any thread; the watchdog's thread sees it at its next poll.
  void setTimeout(std::chrono::milliseconds timeout) { timeoutMs_.store(timeout.count()); }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeoutMs_.load()); }
  // How long a peer may be in no ZRT call while an operation here waits for it before the ranks
  // count as diverged; 0 turns the divergence probe off (waits end at the timeout only).
  void setDivergenceTimeout(std::chrono::milliseconds bound);

 private:
  // What a peer's watchdog answers: its progress and what its process is doing.
  struct PeerState {
    std::uint64_t query = 0;  // the question's number, so a late answer to an earlier one is ignored
    std::uint64_t issued = 0, started = 0, completed = 0, running = 0, kind = 0, bytes = 0;
    std::uint64_t inCall = 0, callKind = 0, millis = 0;
    // Its caller's blocking wait (CallerLabel::Blocked): lane + 1 (0: none), seq, milliseconds.
    std::uint64_t blockedLane = 0, blockedSeq = 0, blockedMillis = 0;
    char text[512] = {};
  };
  // What a peer's watchdog says as its communicator goes (sent once to each peer).
  struct Farewell {
    std::uint64_t issued = 0;
    char text[512] = {};
  };
  PeerState ownState(std::uint64_t query) const;
  // Asks every peer (answering their questions meanwhile, they may be asking too) and waits up
  // to `wait` for the answers; unanswered peers are empty.
  std::vector<std::optional<PeerState>> askPeers(std::chrono::milliseconds wait);
  // Asks every peer where it is and writes the report for `op` (what onTimeout receives).
  std::string diagnose(const ProgressThread::Snapshot& op);
  // The divergence report for `op` from the peers' answers; empty when every peer may still come.
  std::string divergence(const ProgressThread::Snapshot& op,
                         const std::vector<std::optional<PeerState>>& peers);
  void probe(const ProgressThread::Snapshot& op);
  // Why `peer`, blocked in another communicator's operation that this rank has not posted,
  // cannot come while this rank is blocked too; empty when it can.
  // The same cycle must be seen by two probes in a row (a second apart), unchanged.
  std::string waitsOnThisRank(int p, const PeerState& peer, const CallerLabel::Activity& mine);
  // Hands a divergence report to the handler (and, when this rank noticed it, to the peers).
  void diverged(const std::string& report, bool tellPeers);
  void receiveNotices();
  void sayFarewell();
  // Publishes `snap` for the signal-time report when it changed; checks for lost peers.
  void publishSnapshot(const ProgressThread::Snapshot& snap);
  void checkPeers(const ProgressThread::Snapshot& snap);
  // Logs `report`, runs the termination hooks and ends the job (the default handlers).
  [[noreturn]] void abortJob(const std::string& report);
  void run();
  void answerQueries();
  void reapSends();

  MpiCommHandle ctl_;
  int rank_ = 0;
  int size_ = 1;
  const ProgressThread& progress_;
  // The owner may change it while the watchdog's thread reads it (setTimeout).
  std::atomic<std::chrono::milliseconds::rep> timeoutMs_;
  std::atomic<std::chrono::milliseconds::rep> divergenceMs_;
  std::mutex trackMu_;
  bool tracking_ = false;  // counted in CallerLabel::trackActivity
  std::function<void(const std::string&)> onTimeout_;
  std::function<void(const std::string&)> onPeerLost_;
  std::unique_ptr<PeerLiveness> peers_;
  std::vector<int> worldRanks_;  // of each rank of the communicator, for messages
  std::unique_ptr<TerminationReportSlot> lastWords_;  // after peers_: it copies their descriptors
  struct Published {
    bool running = false;
    std::uint64_t started = 0, completed = 0;
  } published_;
  std::uint64_t lostSeq_ = 0;  // the operation during which peers were first seen lost
  std::chrono::steady_clock::time_point lostSince_{};
  bool peerLostReported_ = false;

  std::uint64_t queryIn_ = 0;
  MpiRequest query_;  // after queryIn_, its buffer: released first
  std::uint64_t queries_ = 0;  // questions this watchdog asked
  struct Reply {
    PeerState data;
    MpiRequest req;  // sends data; released before it
  };
  std::vector<std::unique_ptr<Reply>> sends_;
  std::uint64_t reportedSeq_ = 0;
  // The divergence probe: the operation last probed and when; whether a report was handed on.
  std::uint64_t probedSeq_ = 0;
  std::chrono::steady_clock::time_point probedAt_{};
  bool divergedReported_ = false;
  std::vector<std::array<std::uint64_t, 4>> cycles_;  // per peer: the cycle the last probe saw
  // Peers' farewells (their communicator went) and divergence notices, received at each poll.
  Farewell farewellIn_;
  MpiRequest farewell_;  // after its buffer
  std::vector<std::optional<Farewell>> farewells_;
  std::vector<char> noticeIn_;
  MpiRequest notice_;  // after its buffer

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // Last: starts once the members it uses exist.
};

}  // namespace zrt::comm
