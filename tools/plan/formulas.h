// The formulas of zrt-plan as pure functions over plain structs (docs/plan.md states each one):
// model states per rank (the ZeRO paper's, with ZRT's padding and placement), transformer
// activations (Korthikanti et al. 2022), the buffers the Engine allocates (comm buckets, its
// gradient workspace, stage 3's gathered copies, swap and staging buffers) from the config and
// the model's tensors and modules, and a step-time model for the slowdown estimate. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "partition/placement.h"
#include "core/memory_ledger.h"
#include "tools/plan/inputs.h"
#include "tools/plan/model_spec.h"

namespace zrt::plan {

// What the bytes are for, finer than MemTag: master weights and moments are both
// MemTag::OptimizerState, gathered stage-3 parameters are buffers, not model states; the
// Engine's gradient workspace and the reserve are both MemTag::Other.
enum class Purpose : int {
  Parameters = 0,
  Gradients,
  MasterWeights,
  OptimizerMoments,
  CommBuckets,
  GatheredParams,
  SwapBuffers,
  GradientWorkspace,
  Activations,
  Reserve,
};
inline constexpr int kNumPurposes = 10;
std::string_view purposeName(Purpose p);
// The ledger tag the runtime charges these bytes to.
MemTag memTagOf(Purpose p);
bool isModelState(Purpose p);

// Bytes per rank by purpose and place (MemPlace: device, pinned host, host, NVMe).
struct PlanLedger {
  std::array<std::array<std::uint64_t, kNumMemPlaces>, kNumPurposes> cells{};

  void add(Purpose p, MemPlace place, std::uint64_t bytes);
  std::uint64_t get(Purpose p, MemPlace place) const;
  std::uint64_t total(MemPlace place) const;
  std::uint64_t hostTotal() const;  // pinned + pageable
  std::uint64_t modelStates(MemPlace place) const;
  // Summed as the runtime's ledger would show it.
  std::uint64_t byTag(MemTag tag, MemPlace place) const;
};

// ---- Model states -------------------------------------------------------------------------

// What the model-state allocator is given (partition/placement.h: stage, ranks, dtype,
// optimizer, offload and pinning), plus the parameter counts: the formulas place model states by
// the allocator's own rule, so a prediction and an allocation cannot drift apart.
struct ModelStateInputs : ModelStateOptions {
  std::uint64_t trainable = 0;  // Ψ: trainable parameters
  std::uint64_t frozen = 0;     // frozen parameters (LoRA base): 16-bit copies only
};

// Ψ', Ψ'/N' and their frozen counterparts (partition/placement.h).
using Padded = PaddedSizes;

// placeModelStates(in, in.trainable, in.frozen).
ModelStatePlacement modelStatePlacement(const ModelStateInputs& in);

// The model states of one rank in bytes, by purpose and place: each state of placement.h's rule
// (elements times element size, the moments counted m times), with p = bytes of the training
// dtype, m = number of moments, K = 4·(master + m): p·Ψ' + p·Ψ' + K·Ψ' at stage 0, and so on
// (docs/plan.md, "Where model states live", tabulates the rule).
PlanLedger modelStateBytes(const ModelStatePlacement& placement);
PlanLedger modelStateBytes(const ModelStateInputs& in);

// The ZeRO paper's model-state bytes per rank without padding, (2+2+K)Ψ for plain data
// parallel; 2Ψ + 2Ψ + KΨ/N; 2Ψ + (2+K)Ψ/N; (2+2+K)Ψ/N, generalised to p-byte parameters and
// gradients: pΨ + pΨ + KΨ/N and so on. A real number: Ψ/N need not be whole.
double zeroPaperBytes(std::uint64_t psi, int stage, int worldSize, std::uint64_t paramBytes,
                      std::uint64_t k);

// ---- Activations ----------------------------------------------------------------------------

struct ActivationInputs {
  TransformerShape shape;
  std::uint64_t seqLen = 0;
  std::uint64_t microBatch = 1;
  DType precision = DType::F16;
  bool checkpointing = false;
  bool flashAttention = false;  // drops the 5·a·s²·b attention-score term
  std::uint64_t loraRank = 0;
  std::uint64_t loraAdaptersPerLayer = 0;
};

// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
// eq. 1 without tensor parallelism: one layer stores sbh(34 + 5as/h) = 34·sbh + 5·a·s²·b bytes
// of 16-bit activations (1-byte dropout masks included); 34·sbh when attention scores are not
// stored (flashAttention).
std::uint64_t layerActivationBytes(const ActivationInputs& in);
// Per-layer activations as the run holds them at the peak of the backward pass:
//   no checkpointing:   L · sbh(34 + 5as/h)
//   full checkpointing: L · 2sbh (each layer's input) + sbh(34 + 5as/h) (the layer being
//                       recomputed)
// plus 4·s·b·V for the fp32 logits of the loss, plus LoRA's r-wide intermediates 2·s·b·r per
// adapter (without checkpointing). fp32 training doubles the 16-bit terms (an approximation).
std::uint64_t activationBytes(const ActivationInputs& in);

// ---- Buffers --------------------------------------------------------------------------------

struct BufferInputs {
  ModelStatePlacement placement;  // sizes, the fp32 accumulator, the optimizer's states, max_in_cpu
  const Padded& padded() const { return placement.padded; }
  std::uint64_t largestTensor = 0;
  // The trainable tensors' elements in registration order (the reduce buckets' tensors); empty
  // when not known (see bufferBytes).
  std::vector<std::uint64_t> trainableTensors;
  // The modules in registration order; empty when not known (see bufferBytes).
  std::vector<ModuleSize> modules;
  int stage = 0;
  int worldSize = 1;
  int rank = 0;
  DType precision = DType::F16;
  std::uint64_t gradAccum = 1;
  OffloadDevice offloadOptimizer = OffloadDevice::None;
  OffloadDevice offloadParam = OffloadDevice::None;
  bool overlapComm = false;  // two reduce buckets in flight instead of one
  ZeroConfig zero;
  std::uint64_t hugePageBytes = 0;     // Hardware::pinnedHugePageBytes
  std::uint64_t nvmeBlockBytes = 4096;  // Hardware::nvmeBlockBytes
};

// The buffers the Engine allocates per rank, beside the model states (p = bytes of the dtype):
//   comm buckets, the gradient bucketer's own (comm::bucketerMemory) over the trainable
//       tensors with reduce_bucket_size, its staging in host memory (comm::kBucketMemoryPlace:
//       every communicator ZRT has stages there) and its receive buffers on the device:
//       stages 0-1: none (the gradients are all-reduced in place in the gradient buffer);
//       stages 2-3: (overlap_comm ? 2 : 1) · the largest bucket · p of staging, plus, when
//       micro-steps accumulate in the dtype (accumulation > 1 without the fp32 accumulator),
//       a receive buffer per staging buffer as large as the largest piece of the shard a
//       bucket staged there holds, · p, on the device (the bucketer adds it into the gradient
//       shard there). Tensors not known: buckets of min(reduce_bucket_size,
//       Ψ') and receive buffers of min(reduce_bucket_size, Ψ'/N);
//   gradient workspace (device, "other"): the widest module's trainable elements · p, where the
//       caller writes one module's gradients;
//   stage 3 gathered parameters (device): the modules under stage3_param_persistence_threshold
//       elements stay whole; the others are gathered into a pool that keeps them (reused) up to
//       stage3_max_live_parameters: (persistent + min(the others, max_live)) · p. Modules not
//       known: min(Ψ' + Φ', max(max_live, largest tensor)) · p;
//   optimizer swap buffers (pinned host, offload_optimizer nvme): a pool
//       (offload::pinnedPoolBytes) of max(1, buffer_count) buffers each holding a sub-group
//       (OptimizerSwapper::subGroupElements of the shard and sub_group_size) of every fp32 state
//       the optimizer keeps (master weights and moments);
//   parameter staging buffers (pinned host, offload_param nvme, stage 3): max(1, buffer_count)
//       buffers of align4K(largest trainable piece · p + 2·block) + (largest frozen piece · p +
//       2·block), where a piece is this rank's part of a module (gatherPieces) that reaches past
//       the max_in_cpu elements kept in host memory, and block the NVMe file system's alignment
//       (1 for a shard with no NVMe part). Modules not known: one piece of min(buffer_size,
//       shard).
// Parameter all-gathers at stages 1-2 run in place in the parameter buffer (allgather_bucket_size
// bounds their messages, not memory).
PlanLedger bufferBytes(const BufferInputs& in);

// The largest reduce bucket in elements (comm/bucket_plan.h over the trainable tensors; tensors
// not known: min(reduce_bucket_size, Ψ')).
std::uint64_t largestReduceBucket(const BufferInputs& in);


// ---- Step time ------------------------------------------------------------------------------

struct StepTimeInputs {
  Padded padded;
  std::uint64_t trainable = 0, total = 0;  // Ψ_t and Ψ_t + Ψ_frozen, unpadded
  std::uint64_t tokensPerStep = 0;         // per rank: micro-batch · accumulation · seq_len
  std::uint64_t gradAccum = 1;
  int stage = 0;
  bool checkpointing = false;
  DType precision = DType::F16;
  std::uint64_t optimizerBytesPerParam = 12;  // K
  OffloadDevice offloadOptimizer = OffloadDevice::None;
  OffloadDevice offloadParam = OffloadDevice::None;
  Hardware hardware;
};

// Seconds per optimizer step, by part. Nothing is assumed to overlap, so comm and offload terms
// are upper bounds (DeepSpeed overlaps some of them with the backward pass).
struct StepTime {
  double compute = 0;    // (2Ψ_all + 2Ψ_all + 2Ψ_t) · tokens / FLOP/s  (6Ψ per token in full)
  double recompute = 0;  // one extra forward: 2Ψ_all · tokens / FLOP/s
  double comm = 0;       // collective bytes · (N-1)/N / network bandwidth
  double pcie = 0;       // host<->device copies / PCIe bandwidth
  double cpuOptimizer = 0;  // node's optimizer-state traffic / host memory bandwidth
  double nvme = 0;          // node's NVMe reads / read bw + writes / write bw
  double total() const { return compute + recompute + comm + pcie + cpuOptimizer + nvme; }
  // Byte volumes behind the times, for --explain.
  double commBytes = 0, pcieBytes = 0, cpuBytes = 0, nvmeReadBytes = 0, nvmeWriteBytes = 0;
};
StepTime stepTime(const StepTimeInputs& in);

}  // namespace zrt::plan
