// ThreadWorld: N ranks as threads of one process, each with a Communicator. Operations follow
// the same rules as the MPI backend (per-rank counts, in-place conventions, fp16/bf16 sums
// accumulated in fp32 in rank order) and run asynchronously on each rank's progress thread, but
// move data through the process's own memory. Fast unit tests of the bucketers and algorithms
// run on it beside the real MPI runs, and faults can be injected: a rank that never posts an
// operation makes its peers' operations fail with a TimeoutError naming it; mismatched
// operations fail on every rank with a PeerError naming the ranks.
// Thread-safety: each rank's Communicator is used by that rank's thread; the world is shared.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/wait.h"

namespace zrt::comm {

class ThreadWorld {
 public:
  explicit ThreadWorld(int size, std::chrono::milliseconds timeout = defaultWaitTimeout());
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Rank `rank`'s communicator; call once per rank. The world must outlive it.
  std::unique_ptr<Communicator> connect(int rank);

  // Runs body(comm) on `size` threads, one per rank, each with its own communicator, and
  // rethrows the first failure with the rank that raised it.
  static void run(int size, const std::function<void(Communicator&)>& body,
                  std::chrono::milliseconds timeout = defaultWaitTimeout());

 private:
  friend class ThreadCommunicator;
  struct Posted {
    const Collective* op = nullptr;
    std::uint64_t seq = 0;
  };

  // Blocks until every rank reached this barrier; throws TimeoutError naming the ranks that did
  // not arrive after the timeout (and marks the world broken, so later barriers fail at once).
  void barrier(int rank, const std::string& what);
  // "" when every rank posted the same operation; else a message naming the ranks that differ.
  std::string mismatch() const;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;
  int arrivedCount_ = 0;
  std::vector<bool> arrived_;
  std::string broken_;
  std::vector<Posted> posted_;  // written by each rank before barrier 1, read until barrier 2
};

}  // namespace zrt::comm
