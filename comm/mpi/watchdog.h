// Watchdog: keeps a communicator from hanging silently. Its thread watches the operation in
// flight on the progress thread; when one has run longer than the timeout it asks every peer's
// watchdog, over a private duplicate of the communicator, how far that peer got (operations
// posted, started, finished, and what it is running), writes a report naming the operation, its
// bytes and the ranks that had not arrived, and hands it to onTimeout (by default: log it and
// MPI_Abort the job). The same thread answers peers' questions, so a rank whose caller is busy
// or stuck elsewhere still says where it is.
// Construction and destruction are collective over the communicator.
// Thread-safety: internal; the owner only constructs and destroys it.
#pragma once

#include <mpi.h>

#include <array>
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
#include "comm/progress_thread.h"

namespace zrt::comm {

class Watchdog {
 public:
  Watchdog(MPI_Comm comm, const ProgressThread& progress, std::chrono::milliseconds timeout,
           std::function<void(const std::string&)> onTimeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  // Asks every peer where it is and writes the report for `op` (what onTimeout receives).
  std::string diagnose(const ProgressThread::Snapshot& op);
  void run();
  void answerQueries();
  void reapSends();

  MpiCommHandle ctl_;
  int rank_ = 0;
  int size_ = 1;
  const ProgressThread& progress_;
  const std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> onTimeout_;

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
