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
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_handles.h"
#include "comm/mpi/peer_liveness.h"
#include "comm/mpi/termination_report.h"
#include "comm/progress_thread.h"

namespace zrt::comm {

class Watchdog {
 public:
  Watchdog(MPI_Comm comm, const ProgressThread& progress, std::chrono::milliseconds timeout,
           std::function<void(const std::string&)> onTimeout,
           std::function<void(const std::string&)> onPeerLost = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Any thread; the watchdog's thread sees it at its next poll.
  void setTimeout(std::chrono::milliseconds timeout) { timeoutMs_.store(timeout.count()); }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeoutMs_.load()); }

 private:
  // Asks every peer where it is and writes the report for `op` (what onTimeout receives).
  std::string diagnose(const ProgressThread::Snapshot& op);
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
  struct Reply {
    std::uint64_t data[6];
    MpiRequest req;  // sends data; released before it
  };
  std::vector<std::unique_ptr<Reply>> sends_;
  std::uint64_t reportedSeq_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // Last: starts once the members it uses exist.
};

}  // namespace zrt::comm
