// GPT-2's layers on a GPU: the phases gpt2.cpp runs as host kernels elsewhere, each queued on the
// model's compute stream over the same activation buffers (gpt2_buffers.h) and parameters, in
// the same order of operations. An interface, so gpt2.cpp names no CUDA type and a build
// without CUDA has no GPU code: makeCudaLayers() exists only where ZRT_HAVE_CUDA is 1
// (cuda/gpt2_cuda_layers.cpp: products through cuBLAS, the rest as gpt2_cuda_kernels.h's
// kernels). The caller waits for the stream before it hands parameters or gradients back.
// Thread-safety: one thread drives it, as Gpt2.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include <zrt/core/device.h>

#include "tools/trainer/model/gpt2_buffers.h"

namespace zrt::trainer {

// What the phases need of the model beyond the buffers.
struct Gpt2LayerShape {
  int L = 0, C = 0, H = 0, T = 0, V = 0;
  // LoRA: the block parameter index of each target's lora_A (lora_B follows it), or -1.
  std::array<int, kNumLoraTargets> loraA{-1, -1, -1, -1};
  int loraRank = 0;
  float loraScale = 0;
  bool wteTrainable = true;  // a frozen wte (LoRA) skips the head's weight gradient
};

class GpuLayers {
 public:
  virtual ~GpuLayers() = default;
  // x = the embedding of A.inputs() (p: wte, wpe).
  virtual void embeddingForward(const ActivationBuffers& A, float* x, const std::vector<const float*>& p,
                                int batch) = 0;
  // A block from `in` to `out` (null: the recomputation backward needs, all but the output).
  virtual void blockForward(const ActivationBuffers& A, const BlockActs& a, const std::vector<const float*>& p,
                            const float* in, float* out, int batch) = 0;
  virtual void lnfForward(const ActivationBuffers& A, const float* x, const std::vector<const float*>& p,
                          int batch) = 0;
  // The tied head: logits; with `loss`, the probabilities, rowLoss and the mean at A.loss(); with
  // `train` too, the logits' gradient, A.dln and (wte trainable) A.dwteHead.
  virtual void head(const ActivationBuffers& A, const float* wte, int batch, double seed, bool loss, bool train) = 0;
  // A.dres = d loss / d x from A.dln; ln_f's gradients into g.
  virtual void lnfBackward(const ActivationBuffers& A, const float* x, const std::vector<const float*>& p,
                           const std::vector<float*>& g, int batch) = 0;
  // A.dres from d (block output) to d (block input); the block's gradients into g.
  virtual void blockBackward(const ActivationBuffers& A, const BlockActs& a, const std::vector<const float*>& p,
                             const std::vector<float*>& g, const float* in, int batch) = 0;
  // wte's gradient (the head's part, then the lookup's rows) and wpe's, into g (each may be null).
  virtual void embeddingBackward(const ActivationBuffers& A, const std::vector<float*>& g, int batch) = 0;
};

// The CUDA phases on `stream` of `device` (a cuda device). Defined only in builds with CUDA.
std::unique_ptr<GpuLayers> makeCudaLayers(const Gpt2LayerShape& shape, Device& device, Stream& stream);

}  // namespace zrt::trainer
