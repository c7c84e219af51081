// GPT-2, exactly as Hugging Face's GPT2LMHeadModel with a byte vocabulary, forward and backward
// on the CPU (or a GPU): the model the reference trainer (zrt-train) trains through the Engine.
// Where its layers run follows the device: in place on `host`; as host kernels on the device's
// stream on `host-strict` (Device::launchHost: device memory only through the addresses a launch
// hands them); as CUDA phases on `cuda` (gpt2_gpu_layers.h). Inputs and targets are copied to
// the device and the loss back, so no layer reads host memory.
// Matrix products go through oneDNN's sgemm (OpenBLAS's with ZRT_GPT2_GEMM=openblas:
// gpt2_kernels.h), column sums through OpenBLAS's sgemv; the rest are OpenMP loops the compiler vectorises. Activations are fp32 whatever the training dtype: parameters arrive in
// the Engine's dtype and are widened per module, gradients are rounded to it on the way out.
//
// Modules, in registration order (each one an Engine module, so stage 3 gathers block by block):
//   0        "embed": wte.weight [256, C], wpe.weight [T, C]
//   1 .. L   "h.{i}": ln_1.{weight,bias}, attn.c_attn.{weight [C,3C],bias}, attn.c_proj.{weight
//            [C,C],bias}, ln_2.{weight,bias}, mlp.c_fc.{weight [C,4C],bias}, mlp.c_proj.{weight
//            [4C,C],bias}   (names prefixed "h.{i}.", weights [in, out] as HF's Conv1D)
//   L + 1    "ln_f": ln_f.{weight,bias}
// With LoRA (lora.h), every base parameter above is registered frozen and each block's module
// also holds its adapters, after its twelve base parameters, in LoraTarget order:
//   h.{i}.<layer>.lora_A.weight [r, in], h.{i}.<layer>.lora_B.weight [out, r]
// so stage 3 gathers and releases a block's adapters with its (frozen, still sharded) weights.
// The language-model head is tied to wte, so module 0 is read twice in a forward (first and
// last) and its gradient is reported once, at the end of backward, holding both uses.
// Threads: one OpenMP pool does everything; BLAS runs single-threaded inside each call (the
// constructor sets OpenBLAS to one thread, process-wide; oneDNN, on the same OpenMP runtime,
// keeps each call on its thread) and the model splits the products over the pool itself, since
// two pools spinning on the same cores slow each other several-fold.
// OMP_NUM_THREADS sets the pool; OMP_WAIT_POLICY=passive helps on a machine shared with other
// work. OpenBLAS 0.3.21 picks its SSE3 kernels on CPUs it does not know; the constructor warns
// when that happens on an AVX2 or AVX-512 CPU (blas_core.h; zrt-train itself sets
// OPENBLAS_CORETYPE and runs again).
// Thread-safety: one thread drives a Gpt2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <zrt/core/device.h>
#include <zrt/runtime/engine.h>
#include <zrt/runtime/model_spec.h>

#include "tools/trainer/model/lora.h"

namespace zrt::trainer {

struct Gpt2Shape {
  int layers = 4;
  int hidden = 256;  // C
  int heads = 4;     // C % heads == 0
  int seqLen = 128;  // T, also wpe's rows
  int vocab = 256;
};

// Where the model reads parameters and writes gradients: the Engine (EngineSource below), or a
// plain fp32 store in tests. Every parameters(m) is paired with a release(m) once the model is
// done reading them for now (stage 3 frees the gathered copy there); gradients(m) is asked for
// at most once per module per micro-step and handed back with backwardDone(m).
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  virtual std::vector<TensorRef> parameters(std::size_t module) = 0;
  virtual void release(std::size_t module) = 0;
  virtual std::vector<TensorRef> gradients(std::size_t module) = 0;
  virtual void backwardDone(std::size_t module) = 0;
};

class EngineSource final : public ParameterSource {
 public:
  explicit EngineSource(Engine& engine) : engine_(engine) {}
  std::vector<TensorRef> parameters(std::size_t m) override { return engine_.parameters(m); }
  void release(std::size_t m) override { engine_.release(m); }
  std::vector<TensorRef> gradients(std::size_t m) override { return engine_.gradients(m); }
  void backwardDone(std::size_t m) override { engine_.backwardDone(m); }

 private:
  Engine& engine_;
};

// The registration: names, shapes and GPT-2's initialisation (normal(0, 0.02); c_proj weights
// normal(0, 0.02/sqrt(2L)); biases 0; LayerNorm weight 1, bias 0) from generators seeded by
// `seed` and the parameter's index, so every rank and run builds the same model. With `lora`
// enabled the base parameters are frozen (their values unchanged: the adapters draw from
// generators of their own) and the adapters, the only trainable parameters, are added (lora.h).
// Throws InvalidArgument for a shape or LoRA setting that cannot be built.
EngineModel gpt2Model(const Gpt2Shape& shape, std::uint64_t seed, const LoraConfig& lora = {});

// Throws InvalidArgument naming the flag-like field (layers, hidden, heads, seqLen) when a
// shape cannot be built.
void validate(const Gpt2Shape& shape);

struct Gpt2Options {
  // Keep only each block's input in forward and recompute the block in backward.
  bool activationCheckpointing = false;
  // With checkpointing: the kept inputs go to pinned host memory and come back before use.
  bool checkpointOffload = false;
  // Adapters on the layers it names; must be the registration's (gpt2Model's `lora`).
  LoraConfig lora{};
};

// What a Gpt2(shape, options, device, maxBatch) charges to MemTag::Activations once it has run a
// training micro-batch from a source of `dtype`, by place: its activation buffers on the device
// (the kept checkpoints in pinned host memory with checkpointOffload), plus, for a 16-bit source,
// the two fp32 widening scratches of one module each. Counted by the same plan the model
// allocates by. All fp32, whatever `dtype`. zrt-ladder's activation model of the trainer for
// zrt-plan (tools/ladder/prediction.h). Throws as gpt2Model does for a bad shape or LoRA setting.
struct Gpt2ActivationBytes {
  std::uint64_t device = 0;
  std::uint64_t pinnedHost = 0;
};
Gpt2ActivationBytes gpt2ActivationBytes(const Gpt2Shape& shape, const Gpt2Options& options, int maxBatch,
                                        DType dtype);

class Gpt2 {
 public:
  // Activation buffers for micro-batches of up to `maxBatch` sequences come from `device`,
  // charged to MemTag::Activations (offloaded checkpoints: pinned host), at construction. The
  // fp32 copies a 16-bit source needs (one module's parameters and gradients at a time) are
  // Activations too, allocated on the first 16-bit call. Throws InvalidArgument naming the field
  // for a bad shape, maxBatch < 1, or checkpointOffload without activationCheckpointing.
  Gpt2(const Gpt2Shape& shape, Gpt2Options options, Device& device, int maxBatch);
  ~Gpt2();
  Gpt2(const Gpt2&) = delete;
  Gpt2& operator=(const Gpt2&) = delete;

  // One micro-batch of `batch` sequences (inputs and targets are batch x T bytes): forward,
  // the mean cross-entropy over its batch x T tokens, and backward of (that mean x seed), each
  // module's gradients handed to `src` as soon as they are complete. Returns the mean loss.
  // Order of calls on `src`: forward parameters/release 0, 1 .. L, L+1, then 0 again for the
  // head (whose backward runs under that same parameters(0)); backward L+1, L .. 1 (parameters,
  // gradients, backwardDone, release), and last gradients(0)/backwardDone(0) holding both of
  // wte's uses. Throws InvalidArgument for batch outside [1, maxBatch], a token >= vocab, or a
  // source whose tensors do not match the registration (naming the parameter).
  double forwardBackward(ParameterSource& src, const std::uint8_t* inputs,
                         const std::uint8_t* targets, int batch, double seed);
  // Forward only: the mean cross-entropy (validation).
  double loss(ParameterSource& src, const std::uint8_t* inputs, const std::uint8_t* targets,
              int batch);
  // Forward only: logits [batch, T, vocab] (tests compare them with PyTorch's).
  std::vector<float> logits(ParameterSource& src, const std::uint8_t* inputs, int batch);

  // Model FLOPs per token of forward + backward (6 x matmul parameters + causal attention's
  // 6 L C (T + 1)), without recomputation: what "model FLOP rate" figures divide by. With LoRA
  // the frozen weights cost 4 (no weight gradient) and the adapters 6 per parameter.
  double flopsPerToken() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zrt::trainer
