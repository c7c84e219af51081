// The optimizer state of a rank's shard on NVMe (offload_optimizer.device = nvme), stepped
// sub-group by sub-group through pinned buffers while the disk keeps moving. Each of the
// `buffer_count` buffers holds one sub-group's states; sub-group g uses buffer g mod
// buffer_count. While the CPU optimizer updates sub-group g, the disk has the reads of the next
// buffer_count − 1 sub-groups and the write-backs of the previous ones to work on: the moment
// the write-back of a state of sub-group g finishes, the completion (on an I/O ring thread)
// issues the read of that state of sub-group g + buffer_count into the region it freed, so the
// disk never waits for the optimizer's thread to come round. The thread driving the pass waits
// only for what the next update needs: its reads (and, with one buffer or pipeline_read off, the
// write-back that frees its buffer). DeepSpeed's pipelined swapper reads at most one ahead and
// moves the fp32 gradients through NVMe too; here the gradients stay in pinned memory (the
// rank's host shard), so each parameter moves 4 bytes per fp32 state each way (12 for Adam).
//
// Sub-group g covers elements [g·S, min((g+1)·S, count)) of every state, S = sub_group_size
// rounded up to 1024 elements (4 KiB of fp32, so every offset suits O_DIRECT).
// pipeline_read = false reads each sub-group only when it is due; pipeline_write = false waits
// for each write-back before the next sub-group steps.
// Thread-safety: one thread drives a swapper; the offload engine's threads do the I/O and run
// the completions, which share the pass's state with the driving thread under one mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "offload/offload_engine.h"
#include "offload/pinned_buffer_pool.h"
#include "offload/swap_space.h"

namespace zrt {

// One step of a pass, as the optional observer sees it (tests check the order of operations;
// zrt-offload-bench can print a timeline). Issued/finished events of the I/O may come from an
// I/O ring thread; update events from the thread driving the pass.
struct SwapEvent {
  enum class Kind : std::uint8_t {
    ReadIssued,
    ReadDone,
    UpdateBegin,
    UpdateEnd,
    WriteIssued,
    WriteDone,
  };
  Kind kind = Kind::ReadIssued;
  std::size_t group = 0;  // the sub-group
  std::size_t state = 0;  // the state file (I/O events; 0 for updates)
  bool failed = false;    // ReadDone/WriteDone: the request failed
};

struct OptimizerSwapperOptions {
  std::uint64_t subGroupSize = 1'000'000'000;  // zero_optimization.sub_group_size
  int bufferCount = 4;                         // offload_optimizer.buffer_count
  bool pipelineRead = true;
  bool pipelineWrite = true;
  // Called for every event of a pass, from whichever thread it happens on (see SwapEvent);
  // must be thread-safe and quick, and must not call the swapper or wait on the engine.
  std::function<void(const SwapEvent&)> observer;
};

class OptimizerSwapper {
 public:
  // A sub-group's states in pinned memory: states[k] holds `count` elements of file k.
  struct Window {
    std::size_t index = 0;
    std::uint64_t begin = 0;
    std::uint64_t count = 0;
    std::vector<float*> states;
  };
  struct Stats {
    double ioWaitSeconds = 0;   // the step waited for reads or write-backs
    double updateSeconds = 0;   // inside the caller's update
    std::uint64_t bytesRead = 0, bytesWritten = 0;
  };

  // Sizes of the pinned buffers this swapper needs for `states` files of `count` elements.
  static std::uint64_t subGroupElements(std::uint64_t count, std::uint64_t subGroupSize);
  // How many of them a pass holds at once: one a sub-group, at most buffer_count. A shard of
  // fewer sub-groups than buffer_count (DeepSpeed's default sub_group_size makes one) leaves
  // the rest unused, so the pool is made this size rather than buffer_count.
  static std::size_t buffersUsed(std::uint64_t count, std::uint64_t subGroupSize, int bufferCount);

  // `files`: one swap file per fp32 state (master weights, then the moments), `count` elements
  // each. The buffers come from `pool` (buffersUsed() buffers of subGroupElements()·4·files
  // bytes), which with `io` must outlive the swapper.
  OptimizerSwapper(offload::OffloadEngine& io, offload::PinnedBufferPool& pool,
                   std::vector<const offload::SwapFile*> files, std::uint64_t count,
                   OptimizerSwapperOptions options);

  // Reads every sub-group, calls update() on it, writes it back; returns when all writes are
  // done. An I/O error (the first, if several) names the file and offset
  // (offload/io_request.h); after one, nothing more is issued, and forEach returns only when no
  // request is left in flight, with every buffer back in the pool. Any wait longer than
  // defaultWaitTimeout() (core/wait.h) is a TimeoutError saying what it waited for.
  void forEach(const std::function<void(const Window&)>& update);
  // Writes every sub-group from what fill() puts in the buffers (no reads): initialisation.
  void fill(const std::function<void(const Window&)>& fill);

  std::size_t subGroups() const { return groups_; }
  // Threads the CPU optimizer should use while the swapper runs: all cores but one, left to the
  // I/O engine's threads (at least one).
  static int optimizerThreads();
  Stats takeStats();

 private:
  struct Pass;
  void run(const std::function<void(const Window&)>& fn, bool read);

  offload::OffloadEngine& io_;
  offload::PinnedBufferPool& pool_;
  std::vector<const offload::SwapFile*> files_;
  std::uint64_t count_;
  std::uint64_t subGroup_;
  std::size_t groups_;
  OptimizerSwapperOptions options_;
  Stats stats_;
};

}  // namespace zrt
