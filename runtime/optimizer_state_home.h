// Where the optimizer's fp32 states of this rank's shard live, as the step asks instead of
// branching on the offload tier: in memory (the model states' master weights and moments, on the
// device or, offload_optimizer cpu, in host memory: one window over the whole shard), or on NVMe
// (offload_optimizer nvme: sub-group windows streamed through pinned buffers by the
// OptimizerSwapper). Adding a tier means one more implementation here, not a branch in the step.
// The homes hold no buffers: the model states and the swapper own them.
// Thread-safety: one thread (the Engine's caller) uses a home.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "partition/model_states.h"
#include "runtime/optimizer_swapper.h"

namespace zrt {

// Elements [begin, begin + count) of the shard: the master weights (nullptr when the parameters
// are fp32 and have none) and up to two moments (nullptr when the optimizer has fewer).
struct OptimizerWindow {
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  float* master = nullptr;
  float* moment0 = nullptr;
  float* moment1 = nullptr;
};

class OptimizerStateHome {
 public:
  virtual ~OptimizerStateHome() = default;
  // Runs `step` (which calls forEach) so that a failure on one rank is thrown on every rank, as
  // `what`, before any rank copies its update up: a home whose states can fail to arrive (NVMe)
  // has the ranks agree (a collective); one in memory cannot fail alone and just runs it.
  virtual void agreeing(comm::Communicator& comm, const std::string& what,
                        const std::function<void()>& step) = 0;
  // Calls `update` on each window of the shard's states in order; their new values are in place
  // (or written back) when it returns.
  virtual void forEach(const std::function<void(const OptimizerWindow&)>& update) = 0;
  // Threads the optimizer's kernels may use (optim::StepOptions::threads; 0: every core).
  virtual int optimizerThreads() const = 0;
  // Seconds the step waited for the states' I/O since the last call.
  virtual double takeIoWaitSeconds() = 0;
};

// The states in `states` (count: the shard's elements).
std::unique_ptr<OptimizerStateHome> statesInMemory(ModelStates& states, std::uint64_t count);
// The states on NVMe, through `swapper` (which must outlive the home).
std::unique_ptr<OptimizerStateHome> statesSwapped(OptimizerSwapper& swapper);

}  // namespace zrt
