// The reference trainer's GPT-2 activation buffers: what each block keeps from forward for its
// backward, the backward pass's scratch, and the one plan that carves them all from one
// allocation (gpt2.cpp allocates by it, gpt2ActivationBytes counts by it, and a GPU's layers
// (gpt2_gpu_layers.h) read the same buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/trainer/model/gpt2.h"
#include "tools/trainer/model/lora.h"

namespace zrt::trainer {

// A block's parameters, in registration order (gpt2_spec.cpp); with LoRA the adapters follow,
// lora_A then lora_B for each target in LoraConfig::targets.
enum BlockParam : int {
  kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB,
  kNumBlockBaseParams,
};

// Buffers are carved from one allocation; 64-byte starts keep every row loop aligned for SIMD.
constexpr std::size_t kAlignFloats = 16;
inline std::size_t roundUp(std::size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// Records (pointer, size) requests, then points each into one block of memory.
class Carver {
 public:
  void add(float** dst, std::size_t count) { items_.push_back({dst, count}); }
  std::size_t totalFloats() const {
    std::size_t t = 0;
    for (const auto& i : items_) t += roundUp(i.count);
    return t;
  }
  void assign(float* base) {
    for (const auto& i : items_) {
      *i.dst = base;
      base += roundUp(i.count);
    }
  }

 private:
  struct Item {
    float** dst;
    std::size_t count;
  };
  std::vector<Item> items_;
};

// What a block keeps from forward for its backward.
struct BlockActs {
  float *ln1, *mean1, *rstd1, *qkv, *att, *atty, *xmid, *ln2, *mean2, *rstd2, *fch, *fchg;
  float* loraU[kNumLoraTargets] = {};  // x A^T of each adapted layer (LoRA only)
};

// Every activation buffer of the model, and the one plan that carves them: the model allocates
// by it and gpt2ActivationBytes() counts by it, so the two cannot drift apart.
struct ActivationBuffers {
  std::vector<BlockActs> blocks;  // one per block, or one shared when checkpointing
  std::vector<float*> res;        // residual stream x_0 .. x_L (offload: two device slots)
  std::vector<float*> resHost;    // offload: x_0 .. x_{L-1} in pinned memory
  float *lnf = nullptr, *meanf = nullptr, *rstdf = nullptr, *logits = nullptr,
        *rowLoss = nullptr;
  float *dres = nullptr, *dln = nullptr, *datty = nullptr, *dqkv = nullptr, *dfch = nullptr,
        *datt = nullptr, *lnTmp = nullptr, *dwteHead = nullptr, *ones = nullptr,
        *loraDu = nullptr;
  // The micro-batch's inputs and targets (bytes) and the mean loss (a double), on the device
  // too: the layers read and write nothing else, so on a GPU they need no host memory.
  float *inputWords = nullptr, *targetWords = nullptr, *lossWords = nullptr;
  std::uint8_t* inputs() const { return reinterpret_cast<std::uint8_t*>(inputWords); }
  std::uint8_t* targets() const { return reinterpret_cast<std::uint8_t*>(targetWords); }
  double* loss() const { return reinterpret_cast<double*>(lossWords); }

  // Records each buffer with `dev` (device memory) or `pinned` (offloaded checkpoints).
  void carve(const Gpt2Shape& s, const Gpt2Options& options, int maxBatch, bool wteTrainable, Carver& dev,
             Carver& pinned) {
    const std::size_t n = static_cast<std::size_t>(maxBatch) * s.seqLen;
    const std::size_t nc = n * s.hidden;
    const std::size_t att = static_cast<std::size_t>(maxBatch) * s.heads * s.seqLen * s.seqLen;
    const bool ckpt = options.activationCheckpointing, offload = options.checkpointOffload;
    // Checkpointing keeps one block's worth of activations, reused by every block in forward
    // and by the recomputation in backward; without it each block keeps its own.
    blocks.resize(ckpt ? 1 : s.layers);
    for (auto& b : blocks) {
      dev.add(&b.ln1, nc);
      dev.add(&b.mean1, n);
      dev.add(&b.rstd1, n);
      dev.add(&b.qkv, 3 * nc);
      dev.add(&b.att, att);
      dev.add(&b.atty, nc);
      dev.add(&b.xmid, nc);
      dev.add(&b.ln2, nc);
      dev.add(&b.mean2, n);
      dev.add(&b.rstd2, n);
      dev.add(&b.fch, 4 * nc);
      dev.add(&b.fchg, 4 * nc);
      for (LoraTarget t : options.lora.targets) dev.add(&b.loraU[static_cast<int>(t)], n * options.lora.rank);
    }
    if (options.lora.enabled()) dev.add(&loraDu, n * options.lora.rank);
    // Offloaded, the device holds the block being computed's input and output only.
    res.resize(offload ? 2 : s.layers + 1);
    for (auto& r : res) dev.add(&r, nc);
    if (offload) {
      resHost.resize(s.layers);
      for (auto& r : resHost) pinned.add(&r, nc);
    }
    dev.add(&lnf, nc);
    dev.add(&meanf, n);
    dev.add(&rstdf, n);
    dev.add(&logits, n * s.vocab);
    dev.add(&rowLoss, n);
    // The backward pass's scratch: the activations' gradients (one block's, reused by every
    // block) and the head's part of wte's gradient, kept until module 0's gradients are asked
    // for at the end of backward.
    dev.add(&dres, nc);
    dev.add(&dln, nc);
    dev.add(&datty, nc);
    dev.add(&dqkv, 3 * nc);
    dev.add(&dfch, 4 * nc);
    dev.add(&datt, att);
    dev.add(&lnTmp, nc);
    if (wteTrainable) dev.add(&dwteHead, static_cast<std::size_t>(s.vocab) * s.hidden);
    dev.add(&ones, n);
    dev.add(&inputWords, (n + sizeof(float) - 1) / sizeof(float));
    dev.add(&targetWords, (n + sizeof(float) - 1) / sizeof(float));
    dev.add(&lossWords, sizeof(double) / sizeof(float));
  }
};

}  // namespace zrt::trainer
