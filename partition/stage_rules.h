// ZeRO's stage rules as plain data: which model states a stage shards across the data-parallel
// ranks, which offload settings a stage allows, how many bytes per parameter the optimizer keeps
// (the ZeRO paper's K). placement.h builds the placement of every model state on these.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "core/config/config.h"
#include "core/shard.h"
#include "core/dtype.h"

namespace zrt {

// What a stage partitions (ZeRO paper, section 5): stage 1 the optimizer state (P_os), stage 2
// also the gradients (P_os+g), stage 3 also the parameters (P_os+g+p). Stage 0 is plain data
// parallelism: every rank holds everything.
struct StageRules {
  bool shardOptimizer = false;
  bool shardGradients = false;
  bool shardParameters = false;
};

// Throws InvalidArgument for a stage outside 0..3.
StageRules stageRules(int stage);

// Over how many ranks a stage splits its flat buffers: 1 at stage 0 (nothing is sharded; the
// buffers are only padded to the alignment), worldSize at stages 1-3.
int partitionCount(int stage, int worldSize);
// This rank's index among those partitionCount() ranks: 0 at stage 0 (every rank holds the one
// whole "shard"), its rank otherwise.
int partitionRank(int stage, int rank);

// DeepSpeed's rules, which ZRT keeps: the config reader's offloadRuleBreach()
// (core/config/config.h), for a stage outside 0..3 too. Throws InvalidArgument naming the
// setting.
void validateOffload(int stage, OffloadDevice offloadOptimizer, OffloadDevice offloadParam);
// Whether validateOffload() accepts the stage and pairing (no throw: for listing strategies).
bool offloadAllowed(int stage, OffloadDevice offloadOptimizer, OffloadDevice offloadParam);

// The optimizer's per-parameter state, all fp32: an fp32 master copy of the weights when the
// training dtype is 16-bit (mixed precision), or when the optimizer runs offloaded (the CPU
// optimizer keeps its own fp32 copy of the shard even in fp32 training), plus its moments
// (Adam/AdamW: m and v; SGD with momentum: one buffer; plain SGD: none).
struct OptimizerStateSpec {
  bool masterWeights = false;
  int moments = 0;
};

OptimizerStateSpec optimizerStateSpec(OptimizerType type, bool sgdMomentum, DType precision,
                                      bool optimizerOffloaded);

// K of the ZeRO paper: bytes of optimizer state per parameter, 4 * (master + moments).
// Adam/AdamW in fp16/bf16: 12. SGD with momentum: 8, plain SGD: 4 (the master copy only).
// In fp32 training without offload: Adam 8, SGD with momentum 4, plain SGD 0.
std::uint64_t optimizerBytesPerParam(const OptimizerStateSpec& spec);

}  // namespace zrt
