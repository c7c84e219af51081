// What differs between the ZeRO stages, as the questions the Engine's step loop asks instead of
// branching on the stage:
//   GradientPolicy: what becomes of a finished gradient (added up locally and reduced once at
//     the accumulation boundary, stages 0/1, or reduced into this rank's shard every micro-step,
//     stages 2/3) and where the optimizer finds the step's gradients;
//   ParameterHome: where a parameter lives (whole on every rank, stages 0-2, or a shard gathered
//     module by module, stage 3) and how the updated shard gets back to every rank.
// Adding a stage means one more implementation of one of them (runtime/replicated_gradients.cpp,
// sharded_gradients.cpp, whole_parameters.cpp, partitioned_parameters.cpp), not a branch in every
// method of the Engine. Where the optimizer's states live (in memory or swapped through NVMe) is
// the same kind of question: OptimizerStateHome (optimizer_state_home.h).
// The policies hold no buffers: RankGradients and the model states own them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/allgather_bucketer.h"
#include "comm/gradient_bucketer.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shard.h"
#include "partition/param_coordinator.h"
#include "partition/param_store.h"
#include "runtime/engine_layout.h"
#include "runtime/tensor_ref.h"

namespace zrt {

// A rank's gradient buffers and where the micro-step stands, as RankGradients hands them to its
// policy.
struct GradientBuffers {
  DType dtype = DType::F32;
  std::size_t es = 4;
  // Where the gradients reduce to: the device buffer (whole at stages 0/1, the shard at 2/3), or
  // at stages 2/3 with the optimizer offloaded the host shard (there is no device buffer then).
  char* reduced = nullptr;
  // 16-bit training with accumulation: the fp32 sum of the micro-steps (model_states.h), the
  // whole buffer at stages 0/1, the shard at 2/3; null otherwise.
  float* accumulator = nullptr;
  char* hostShard = nullptr;  // the offloaded optimizer's gradients and update; null on the device
  char* workspace = nullptr;  // one module's gradients as the caller writes them
  ShardRange shard;           // this rank's shard of the trainable buffer
  comm::GradientBucketer* bucketer = nullptr;
  // Where the host cannot touch device memory (host-strict, a GPU): the device and the stream
  // its kernels run on, in order; null on the host device, whose step runs host loops as before.
  Device* device = nullptr;
  Stream* stream = nullptr;
  // `reduced` is the offloaded optimizer's pinned host shard (stages 2/3 with the optimizer
  // offloaded), and so is the accumulator: host code may work on them once the buckets fenced.
  bool shardOnHost = false;
  int micro = 0;  // the micro-step under way (or just finished), from 0
  bool boundary = false;  // it is the step's last
  bool reducing = false;  // its buckets are posted
};

// The step's gradients of this rank's shard, as the optimizer reads them.
struct GradientShard {
  const char* data = nullptr;
  DType type = DType::F32;
};

class GradientPolicy {
 public:
  virtual ~GradientPolicy() = default;
  // Whether micro-step `micro` of `accumulation` posts its buckets.
  virtual bool reducesIn(int micro, int accumulation) const = 0;
  // Whether the buckets add onto the reduced buffer instead of overwriting it.
  virtual bool bucketsAccumulate(const GradientBuffers& b) const = 0;
  // Where the caller writes p's gradient in this micro-step.
  virtual char* home(const ParamInfo& p, const GradientBuffers& b) const = 0;
  // p's gradient, written at `grad`, is finished for this micro-step.
  virtual void finished(const ParamInfo& p, const char* grad, const GradientBuffers& b) = 0;
  // The micro-step's buckets have reduced.
  virtual void reduced(const GradientBuffers& b) = 0;
  // The step's gradients of the shard, and the ones this rank adds to the norm (`normShard`'s).
  virtual GradientShard shard(const GradientBuffers& b) const = 0;
  virtual GradientShard normShare(const GradientBuffers& b, const ShardRange& normShard) const = 0;
  // Before the optimizer reads shard(): stage 1 with the optimizer offloaded copies it down.
  virtual void beforeOptimizer(Device& device, Stream* copies, const GradientBuffers& b) const = 0;
};

std::unique_ptr<GradientPolicy> replicatedGradients(bool copiesShardDown);  // stages 0, 1
std::unique_ptr<GradientPolicy> shardedGradients();                         // stages 2, 3

// What a parameter home is built from; the assembler keeps them alive.
struct ParameterParts {
  const ModelLayout* layout = nullptr;
  const ModelStates* states = nullptr;
  DType dtype = DType::F32;
  comm::Communicator* comm = nullptr;
  // offload_param nvme: the trainable and frozen shards, part in host memory, part on NVMe.
  ParamShardStore* stores[2] = {nullptr, nullptr};
  // Set where the host cannot touch device memory: parameters are read back through copies.
  Device* device = nullptr;
};

class ParameterHome {
 public:
  virtual ~ParameterHome() = default;
  // This rank's shard of the trainable parameters, where the optimizer updates them.
  virtual char* trainableShard() const = 0;
  // Module m's parameters, whole; paired with release(m).
  virtual std::vector<TensorRef> parameters(std::size_t m) = 0;
  virtual void release(std::size_t m) = 0;
  // A micro-step's fetches: begun, counted (naming modules left unreleased), ended.
  virtual void beginPass() {}
  virtual FetchCounts takeCounts(std::string& unreleased) {
    (void)unreleased;
    return {};
  }
  // The first NVMe read that failed in the pass, or empty; nullopt when nothing is read from
  // NVMe (then no rank asks its peers).
  virtual std::optional<std::string> takeIoFailure() { return std::nullopt; }
  virtual void endPass() {}
  // The updated shards go back to every rank's parameters. Collective.
  virtual void publishUpdate() = 0;
  // Whether whole copies are kept that a change of the shards (a load) makes stale.
  virtual bool keepsGatheredCopies() const { return false; }
  // Parameter p's value, whole, in fp32. Collective.
  virtual std::vector<float> value(const ParamInfo& p) const = 0;
};

// Stages 0-2: every rank holds every parameter; `gatherer` (stages 1/2 on several ranks, else
// null) brings each rank's updated shard to the others.
std::unique_ptr<ParameterHome> wholeParameters(const ParameterParts& parts,
                                               std::unique_ptr<comm::AllGatherBucketer> gatherer);
// Stage 3: each rank holds its shard; the coordinator gathers modules as they are fetched.
std::unique_ptr<ParameterHome> partitionedParameters(const ParameterParts& parts,
                                                     std::unique_ptr<ParamCoordinator> coordinator);

}  // namespace zrt
