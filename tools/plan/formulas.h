// The formulas of zrt-plan as pure functions over plain structs (docs/plan.md states each one):
// model states per rank (the ZeRO paper's, with ZRT's padding and placement), transformer
// activations (Korthikanti et al. 2022), communication and swap buffers from the config's
// bucket sizes, and a step-time model for the slowdown estimate. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "partition/placement.h"
#include "core/memory_ledger.h"
#include "tools/plan/inputs.h"
#include "tools/plan/model_spec.h"

namespace zrt::plan {

// What the bytes are for, finer than MemTag: master weights and moments are both
// MemTag::OptimizerState, gathered stage-3 parameters are buffers, not model states.
enum class Purpose : int {
  Parameters = 0,
  Gradients,
  MasterWeights,
  OptimizerMoments,
  CommBuckets,
  GatheredParams,
  SwapBuffers,
  Activations,
  Reserve,
};
inline constexpr int kNumPurposes = 9;
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
  Padded padded;
  std::uint64_t largestTensor = 0;
  int stage = 0;
  DType precision = DType::F16;
  OffloadDevice offloadOptimizer = OffloadDevice::None;
  OffloadDevice offloadParam = OffloadDevice::None;
  bool overlapComm = false;  // two reduce buckets in flight instead of one
  ZeroConfig zero;
};

// Communication and swap buffers per rank:
//   reduce buckets (device): (overlapComm ? 2 : 1) · min(reduce_bucket_size, Ψ') · p
//   stage 3 gathered parameters (device):
//       min(Ψ'_all, max(stage3_max_live_parameters + stage3_prefetch_bucket_size, largest)) · p
//   optimizer swap buffers (pinned host, offload_optimizer nvme):
//       buffer_count · align4K(align32(min(sub_group_size, Ψ'/N)) · 4)
//   parameter swap buffers (pinned host, offload_param nvme):
//       buffer_count · align4K(buffer_size · p)
// (align4K: the pinned buffer pool's rounding of each buffer to 4096 bytes).
// Parameter all-gathers at stages 1-2 run in place in the parameter buffer (allgather_bucket_size
// bounds their messages, not memory).
PlanLedger bufferBytes(const BufferInputs& in);

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
