// GPT-2's forward and backward over a ParameterSource: the module protocol (parameters, release,
// gradients, backwardDone in the order the Engine expects), the activation memory plan and
// activation checkpointing. The arithmetic is in gpt2_kernels.cpp.
#include "tools/trainer/model/gpt2.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "tools/trainer/model/blas_core.h"
#include "tools/trainer/model/gpt2_kernels.h"

namespace zrt::trainer {

namespace k = kernels;

namespace {

// A block's parameters, in registration order (gpt2_spec.cpp); with LoRA the adapters follow,
// lora_A then lora_B for each target in LoraConfig::targets.
enum BlockParam : int {
  kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB,
  kNumBlockBaseParams,
};

// Buffers are carved from one allocation; 64-byte starts keep every row loop aligned for SIMD.
constexpr std::size_t kAlignFloats = 16;
std::size_t roundUp(std::size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

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
  }
};

// The widest module's parameters, each rounded up as the widening scratches lay them out.
std::uint64_t widestModuleFloats(const EngineModel& spec) {
  std::uint64_t widest = 0;
  for (const auto& m : spec.modules) {
    std::uint64_t padded = 0;
    for (const auto& p : m.params) padded += roundUp(numelOf(p));
    widest = std::max(widest, padded);
  }
  return widest;
}

}  // namespace

Gpt2ActivationBytes gpt2ActivationBytes(const Gpt2Shape& shape, const Gpt2Options& options, int maxBatch,
                                        DType dtype) {
  const EngineModel spec = gpt2Model(shape, 0, options.lora);
  Carver dev, pinned;
  ActivationBuffers buffers;
  buffers.carve(shape, options, maxBatch, spec.modules[0].params[0].trainable, dev, pinned);
  Gpt2ActivationBytes b;
  b.device = dev.totalFloats() * sizeof(float);
  if (options.checkpointOffload) b.pinnedHost = pinned.totalFloats() * sizeof(float);
  // A 16-bit source: one module's parameters and one module's gradients widened to fp32.
  if (dtype != DType::F32) b.device += 2 * widestModuleFloats(spec) * sizeof(float);
  return b;
}

struct Gpt2::Impl : ActivationBuffers {
  // A module's gradients: where the kernels write (fp32) and where they go (the source's).
  struct Grads {
    std::vector<TensorRef> refs;
    std::vector<float*> ptr;
  };

  Gpt2Shape shape;
  Gpt2Options options;
  Device& device;
  int maxBatch;
  int L, C, H, T, V;
  std::vector<std::vector<std::string>> names;  // per module, per parameter
  std::vector<std::vector<std::uint64_t>> numels;
  std::uint64_t maxModuleFloats = 0;  // padded, for the 16-bit widening scratches
  // LoRA: the block parameter index of each target's lora_A (lora_B follows it), or -1.
  int loraA[kNumLoraTargets] = {-1, -1, -1, -1};
  float loraScale = 0;
  // Whether wte trains: a frozen one (LoRA) skips the head's weight gradient.
  bool wteTrainable = true;

  DeviceMemory deviceActs, pinnedActs, wideParams, wideGrads;
  std::unique_ptr<Stream> stream;  // offloaded checkpoints' copies

  Impl(const Gpt2Shape& s, Gpt2Options o, Device& d, int mb)
      : shape(s), options(o), device(d), maxBatch(mb) {
    validate(s);
    if (mb < 1) ZRT_THROW(InvalidArgument, "gpt2: maxBatch must be at least 1, got ", mb);
    if (o.checkpointOffload && !o.activationCheckpointing)
      ZRT_THROW(InvalidArgument,
                "gpt2: checkpointOffload needs activationCheckpointing (it offloads the kept "
                "block inputs)");
    L = s.layers, C = s.hidden, H = s.heads, T = s.seqLen, V = s.vocab;
    const EngineModel spec = gpt2Model(s, 0, o.lora);
    wteTrainable = spec.modules[0].params[0].trainable;
    if (o.lora.enabled()) {
      loraScale = static_cast<float>(o.lora.scaling());
      for (std::size_t k = 0; k < o.lora.targets.size(); ++k)
        loraA[static_cast<int>(o.lora.targets[k])] = kNumBlockBaseParams + 2 * static_cast<int>(k);
    }
    for (const auto& m : spec.modules) {
      names.emplace_back();
      numels.emplace_back();
      for (const auto& p : m.params) {
        names.back().push_back(p.name);
        numels.back().push_back(numelOf(p));
      }
    }
    maxModuleFloats = widestModuleFloats(spec);
    allocate();
    k::initThreads();
    warnAboutBlasKernels();
    // Named (at info level) when chosen, so a script that sets the variable can tell a build
    // that reads it from one that does not.
    if (const char* v = std::getenv(k::kGemmLibraryVariable); v && *v)
      ZRT_INFO("gpt2: matrix products through ", k::gemmLibraryName(k::gemmLibrary()), " (",
               k::kGemmLibraryVariable, "=", v, ")");
  }

  // zrt-train runs itself again asking for the CPU's kernels (its main.cpp); a program that embeds
  // the model, or a user who set an old core type, is told what the fallback costs.
  static void warnAboutBlasKernels() {
    const std::string core = blasCoreName();
    const char* better = betterBlasCore(core, cpuVectorsHere());
    if (!better) return;
    warnOnce("gpt2-openblas-core",
             "gpt2: OpenBLAS chose its " + core + " kernels, but this CPU has " +
                 (std::string(better) == "SkylakeX" ? "AVX-512" : "AVX2") +
                 ": matrix products run several times slower than they could. Set "
                 "OPENBLAS_CORETYPE=" + better + " in the environment to use them.");
  }

  ~Impl() {
    if (!stream) return;
    try {
      stream->synchronize();
    } catch (const std::exception& e) {
      logError(std::string("gpt2: an activation copy failed at shutdown: ") + e.what());
    }
  }

  void allocate() {
    const std::size_t n = static_cast<std::size_t>(maxBatch) * T;
    Carver dev, pinned;
    const bool offload = options.checkpointOffload;
    carve(shape, options, maxBatch, wteTrainable, dev, pinned);
    deviceActs = device.allocate(dev.totalFloats() * sizeof(float), MemTag::Activations);
    dev.assign(deviceActs.as<float>());
    if (offload) {
      pinnedActs = device.allocatePinned(pinned.totalFloats() * sizeof(float), MemTag::Activations);
      pinned.assign(pinnedActs.as<float>());
      stream = device.createStream();
    }
    std::fill(ones, ones + n, 1.0f);
  }

  float* x(int k) const { return options.checkpointOffload ? res[k % 2] : res[k]; }
  BlockActs& acts(int block) { return options.activationCheckpointing ? blocks[0] : blocks[block]; }

  std::string moduleName(std::size_t m) const {
    if (m == 0) return "embed";
    if (m == static_cast<std::size_t>(L) + 1) return "ln_f";
    return "h." + std::to_string(m - 1);
  }

  void checkRefs(std::size_t m, const std::vector<TensorRef>& refs, const char* what) const {
    if (refs.size() != names[m].size())
      ZRT_THROW(InvalidArgument, "gpt2: ", what, "(", m, ") for module ", moduleName(m),
                " returned ", refs.size(), " tensors, expected ", names[m].size());
    for (std::size_t i = 0; i < refs.size(); ++i) {
      if (refs[i].numel != numels[m][i])
        ZRT_THROW(InvalidArgument, "gpt2: ", what, "(", m, ") gave ", names[m][i], " with ",
                  refs[i].numel, " elements, expected ", numels[m][i]);
    }
  }

  // Module m's parameters as fp32: the source's own memory when it holds fp32, else widened
  // into a scratch shared by all modules (one module is read at a time).
  std::vector<const float*> params(ParameterSource& src, std::size_t m) {
    const std::vector<TensorRef> refs = src.parameters(m);
    checkRefs(m, refs, "parameters");
    std::vector<const float*> out(refs.size());
    std::size_t offset = 0;
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const TensorRef& r = refs[i];
      if (!r.data)
        ZRT_THROW(InvalidArgument, "gpt2: parameters(", m, ") gave ", names[m][i],
                  " without data");
      if (r.dtype == DType::F32) {
        out[i] = static_cast<const float*>(r.data);
        continue;
      }
      float* dst = wideScratch(wideParams) + offset;
      offset += roundUp(r.numel);
      const auto* bits = static_cast<const std::uint16_t*>(r.data);
      const auto count = static_cast<std::int64_t>(r.numel);
      if (r.dtype == DType::BF16) {
#pragma omp parallel for schedule(static) if (k::worthThreads(count))
        for (std::int64_t j = 0; j < count; ++j) dst[j] = bf16ToFloat(bits[j]);
      } else {
#pragma omp parallel for schedule(static) if (k::worthThreads(count))
        for (std::int64_t j = 0; j < count; ++j) dst[j] = halfToFloat(bits[j]);
      }
      out[i] = dst;
    }
    return out;
  }

  // Allocated on first use: fp32 training never needs them.
  float* wideScratch(DeviceMemory& mem) {
    if (!mem) mem = device.allocate(maxModuleFloats * sizeof(float), MemTag::Activations);
    return mem.as<float>();
  }

  // Module m's gradients: written in place when the source takes fp32, else computed in a
  // scratch and rounded to the source's dtype by finishGrads.
  Grads openGrads(ParameterSource& src, std::size_t m) {
    Grads g;
    g.refs = src.gradients(m);
    checkRefs(m, g.refs, "gradients");
    g.ptr.resize(g.refs.size());
    std::size_t offset = 0;
    for (std::size_t i = 0; i < g.refs.size(); ++i) {
      const TensorRef& r = g.refs[i];
      if (!r.data) {  // a frozen parameter: its gradient is not computed
        g.ptr[i] = nullptr;
      } else if (r.dtype == DType::F32) {
        g.ptr[i] = static_cast<float*>(r.data);
      } else {  // 16-bit: computed in fp32, rounded by finishGrads
        g.ptr[i] = wideScratch(wideGrads) + offset;
        offset += roundUp(r.numel);
      }
    }
    return g;
  }

  void finishGrads(ParameterSource& src, std::size_t m, const Grads& g) {
    for (std::size_t i = 0; i < g.refs.size(); ++i) {
      const TensorRef& r = g.refs[i];
      if (!r.data || r.dtype == DType::F32) continue;
      auto* bits = static_cast<std::uint16_t*>(r.data);
      const float* from = g.ptr[i];
      const auto count = static_cast<std::int64_t>(r.numel);
      if (r.dtype == DType::BF16) {
#pragma omp parallel for schedule(static) if (k::worthThreads(count))
        for (std::int64_t j = 0; j < count; ++j) bits[j] = floatToBf16(from[j]);
      } else {
#pragma omp parallel for schedule(static) if (k::worthThreads(count))
        for (std::int64_t j = 0; j < count; ++j) bits[j] = floatToHalf(from[j]);
      }
    }
    src.backwardDone(m);
  }

  void checkBatch(const std::uint8_t* inputs, const std::uint8_t* targets, int batch) const {
    if (batch < 1 || batch > maxBatch)
      ZRT_THROW(InvalidArgument, "gpt2: batch must be in [1, ", maxBatch, "] (the maxBatch it was built for), got ", batch);
    if (V == 256) return;  // every byte is a token
    const std::size_t n = static_cast<std::size_t>(batch) * T;
    for (std::size_t i = 0; i < n; ++i) {
      if (inputs[i] >= V)
        ZRT_THROW(InvalidArgument, "gpt2: inputs[", i, "] = ", int{inputs[i]},
                  " is outside the vocabulary of ", V);
      if (targets && targets[i] >= V)
        ZRT_THROW(InvalidArgument, "gpt2: targets[", i, "] = ", int{targets[i]},
                  " is outside the vocabulary of ", V);
    }
  }

  // The block functions below run on every thread of one parallel region (the kernels'
  // convention, gpt2_kernels.h): the row kernels of a chain work on the thread's rows, so
  // barriers stand only where a kernel reads rows another thread wrote (weight gradients, which
  // sum over every row; attention, which reads whole sequences, unless each thread's rows are
  // whole sequences). One region per block, rather than one per kernel, saves the pool's
  // wake-ups, and each thread's rows stay in its cache from one kernel to the next.
  template <class F>
  static void onTeam(bool parallel, const F& f) {
#pragma omp parallel if (parallel)
    f();
  }
  // A block's largest product is n x 4C x C.
  bool blockWorthThreads(int n) const { return k::worthThreads(n, 4 * C, C); }

  // The calling thread's rows of a batch and its attention pairs. When the sequences divide
  // evenly among the threads each takes whole sequences, so attention reads only rows its own
  // thread wrote; otherwise rows go in granules and attention needs a barrier on each side.
  struct Share {
    k::Span rows, pairs;
    bool wholeSequences;
  };
  Share share(int batch) const {
    if (batch % omp_get_num_threads() == 0) {
      const k::Span seq = k::threadShare(batch, 1);
      return {{seq.begin * T, seq.end * T}, {seq.begin * H, seq.end * H}, true};
    }
    return {k::threadShare(batch * T, k::kRowGranule), k::threadShare(batch * H, 1), false};
  }

  // Target t's adapter path added onto its layer's output y (y null: only its kept x A^T).
  void adapt(LoraTarget t, BlockActs& a, const std::vector<const float*>& p, const float* x, float* y,
             k::Span rows) {
    const int ia = loraA[static_cast<int>(t)];
    if (ia < 0) return;
    k::loraForward(y, a.loraU[static_cast<int>(t)], x, p[ia], p[ia + 1], loraScale, rows,
                   static_cast<int>(inFeatures(t, C)), static_cast<int>(outFeatures(t, C)), options.lora.rank);
  }

  // Target t's adapter backward from its layer's output gradient dy: dx (the layer's input
  // gradient, already holding the base layer's part, on this thread's rows) gains the adapter's
  // part. Every row of dy must be final; it has a barrier inside (all threads reach it, as every
  // thread sees the same targets).
  void adaptBack(LoraTarget t, BlockActs& a, const std::vector<const float*>& p, const std::vector<float*>& g,
                 const float* dy, const float* x, float* dx, int n, k::Span rows) {
    const int ia = loraA[static_cast<int>(t)];
    if (ia < 0) return;
    const int in = static_cast<int>(inFeatures(t, C)), out = static_cast<int>(outFeatures(t, C));
    const int r = options.lora.rank;
    k::loraDu(loraDu, dy, p[ia + 1], loraScale, rows, out, r);
#pragma omp barrier
    k::loraParamGrads(g[ia], g[ia + 1], dy, x, a.loraU[static_cast<int>(t)], loraDu, loraScale, n,
                      in, out, r);
    k::loraInputGrad(dx, loraDu, p[ia], rows, in, r);
  }

  // On every thread of a region (blockWorthThreads).
  void blockForward(BlockActs& a, const std::vector<const float*>& p, const float* in,
                    float* out, int batch) {
    const Share s = share(batch);
    k::layerNormForward(a.ln1, a.mean1, a.rstd1, in, p[kLn1W], p[kLn1B], s.rows, C);
    k::linearForward(a.qkv, a.ln1, p[kAttnW], p[kAttnB], nullptr, s.rows, C, 3 * C);
    adapt(LoraTarget::Qkv, a, p, a.ln1, a.qkv, s.rows);
    if (!s.wholeSequences) {
#pragma omp barrier
    }
    k::attentionForward(a.atty, a.att, a.qkv, s.pairs, T, C, H);
    if (!s.wholeSequences) {
#pragma omp barrier
    }
    k::linearForward(a.xmid, a.atty, p[kProjW], p[kProjB], in, s.rows, C, C);
    adapt(LoraTarget::Proj, a, p, a.atty, a.xmid, s.rows);
    k::layerNormForward(a.ln2, a.mean2, a.rstd2, a.xmid, p[kLn2W], p[kLn2B], s.rows, C);
    k::linearForward(a.fch, a.ln2, p[kFcW], p[kFcB], nullptr, s.rows, C, 4 * C);
    adapt(LoraTarget::Fc, a, p, a.ln2, a.fch, s.rows);
    k::geluForward(a.fchg, a.fch, s.rows, 4 * C);  // a.fch becomes GELU's slope, for backward
    // Recomputation for backward needs everything but the block's output (but the last layer's
    // adapter input product, which its backward reads).
    if (out) k::linearForward(out, a.fchg, p[kFcProjW], p[kFcProjB], a.xmid, s.rows, 4 * C, C);
    adapt(LoraTarget::MlpProj, a, p, a.fchg, out, s.rows);
  }

  // On every thread of a region. dres holds d loss / d (block output) on entry and d loss /
  // d (block input) on return. Between barriers, what a phase's weight gradients read (every
  // row) is what no thread writes in that phase.
  void blockBackward(BlockActs& a, const std::vector<const float*>& p,
                     const std::vector<float*>& g, const float* in, int batch) {
    const int n = batch * T;
    const Share s = share(batch);
    k::linearParamGrads(g[kFcProjW], g[kFcProjB], dres, a.fchg, ones, n, 4 * C, C);
    k::linearInputGrad(dfch, dres, p[kFcProjW], s.rows, 4 * C, C, false);
    adaptBack(LoraTarget::MlpProj, a, p, g, dres, a.fchg, dfch, n, s.rows);
    k::geluBackward(dfch, a.fch, s.rows, 4 * C);
#pragma omp barrier
    k::linearParamGrads(g[kFcW], g[kFcB], dfch, a.ln2, ones, n, C, 4 * C);
    k::linearInputGrad(dln, dfch, p[kFcW], s.rows, C, 4 * C, false);
    adaptBack(LoraTarget::Fc, a, p, g, dfch, a.ln2, dln, n, s.rows);
    k::layerNormBackward(dres, lnTmp, dln, a.xmid, p[kLn2W], a.mean2, a.rstd2, s.rows, C);
#pragma omp barrier
    k::layerNormParamGrads(g[kLn2W], g[kLn2B], dln, lnTmp, ones, n, C);
    k::linearParamGrads(g[kProjW], g[kProjB], dres, a.atty, ones, n, C, C);
    k::linearInputGrad(datty, dres, p[kProjW], s.rows, C, C, false);
    adaptBack(LoraTarget::Proj, a, p, g, dres, a.atty, datty, n, s.rows);
    if (!s.wholeSequences) {
#pragma omp barrier
    }
    k::attentionBackward(dqkv, datt, datty, a.qkv, a.att, s.pairs, T, C, H);
#pragma omp barrier
    k::linearParamGrads(g[kAttnW], g[kAttnB], dqkv, a.ln1, ones, n, C, 3 * C);
    k::linearInputGrad(dln, dqkv, p[kAttnW], s.rows, C, 3 * C, false);
    adaptBack(LoraTarget::Qkv, a, p, g, dqkv, a.ln1, dln, n, s.rows);
    k::layerNormBackward(dres, lnTmp, dln, in, p[kLn1W], a.mean1, a.rstd1, s.rows, C);
#pragma omp barrier
    k::layerNormParamGrads(g[kLn1W], g[kLn1B], dln, lnTmp, ones, n, C);
  }

  enum class Mode { Train, Loss, Logits };

  double run(ParameterSource& src, const std::uint8_t* inputs, const std::uint8_t* targets,
             int batch, double seed, Mode mode, float* logitsOut) {
    checkBatch(inputs, targets, batch);
    const int n = batch * T;
    const std::size_t ncBytes = static_cast<std::size_t>(n) * C * sizeof(float);
    const bool train = mode == Mode::Train;
    const bool offload = options.checkpointOffload;
    const std::size_t lnfModule = static_cast<std::size_t>(L) + 1;

    {
      const auto p = params(src, 0);
      onTeam(k::worthThreads(static_cast<std::int64_t>(n) * C),
             [&] { k::embeddingForward(x(0), inputs, p[0], p[1], share(batch).rows, T, C); });
      src.release(0);
    }
    for (int b = 0; b < L; ++b) {
      if (offload && train) {
        // x(b + 1) reuses the slot of x_{b-1}, whose copy out was queued one block ago; x_b's
        // copy overlaps this block's compute.
        stream->synchronize();
        device.copyAsync(resHost[b], x(b), ncBytes, *stream);
      }
      const auto p = params(src, b + 1);
      onTeam(blockWorthThreads(n), [&] { blockForward(acts(b), p, x(b), x(b + 1), batch); });
      src.release(b + 1);
    }
    {
      const auto p = params(src, lnfModule);
      onTeam(k::worthThreads(static_cast<std::int64_t>(n) * C), [&] {
        k::layerNormForward(lnf, meanf, rstdf, x(L), p[0], p[1], share(batch).rows, C);
      });
      src.release(lnfModule);
    }

    // The head, tied to wte: forward and (training) its backward under one parameters(0).
    double loss = 0;
    {
      const auto p = params(src, 0);
      const float* wte = p[0];
      onTeam(k::worthThreads(n, V, C), [&] {
        k::gemm(false, true, n, V, C, 1.0f, lnf, C, wte, C, 0.0f, logits, V);
        if (mode == Mode::Logits) return;
#pragma omp barrier
        const k::Span rows = share(batch).rows;
        k::crossEntropyForward(logits, rowLoss, targets, rows, V);
        if (!train) return;
        k::crossEntropyBackward(logits, targets, rows, n, V, seed);
#pragma omp barrier
        k::gemm(false, false, n, C, V, 1.0f, logits, V, wte, C, 0.0f, dln, C);
        if (wteTrainable) k::gemm(true, false, V, C, n, 1.0f, logits, V, lnf, C, 0.0f, dwteHead, C);
      });
      if (mode == Mode::Logits) {
        std::memcpy(logitsOut, logits, static_cast<std::size_t>(n) * V * sizeof(float));
        src.release(0);
        return 0;
      }
      loss = k::meanLoss(rowLoss, n);
      src.release(0);
    }
    if (!train) return loss;

    {
      const auto p = params(src, lnfModule);
      const Grads g = openGrads(src, lnfModule);
      std::memset(dres, 0, ncBytes);
      onTeam(k::worthThreads(static_cast<std::int64_t>(n) * C), [&] {
        k::layerNormBackward(dres, lnTmp, dln, x(L), p[0], meanf, rstdf, share(batch).rows, C);
#pragma omp barrier
        k::layerNormParamGrads(g.ptr[0], g.ptr[1], dln, lnTmp, ones, n, C);
      });
      finishGrads(src, lnfModule, g);
      src.release(lnfModule);
    }
    for (int b = L - 1; b >= 0; --b) {
      if (offload) {
        // x_b is on the device: the last block's input never left its slot, the others were
        // fetched one block ago. The slot of x_{b+1}, no longer needed, takes x_{b-1}.
        stream->synchronize();
        if (b >= 1) device.copyAsync(x(b - 1), resHost[b - 1], ncBytes, *stream);
      }
      const auto p = params(src, b + 1);
      if (options.activationCheckpointing)
        onTeam(blockWorthThreads(n), [&] { blockForward(acts(b), p, x(b), nullptr, batch); });
      const Grads g = openGrads(src, b + 1);
      onTeam(blockWorthThreads(n), [&] { blockBackward(acts(b), p, g.ptr, x(b), batch); });
      finishGrads(src, b + 1, g);
      src.release(b + 1);
    }
    {
      const Grads g = openGrads(src, 0);
      // wte's gradient holds both its uses: the head's part, then the lookup's rows added. The
      // head's part was skipped for a wte registered frozen; a source that wants it anyway gets
      // it from the probabilities' gradient, still in `logits`.
      if (g.ptr[0] && wteTrainable)
        std::memcpy(g.ptr[0], dwteHead, static_cast<std::size_t>(V) * C * sizeof(float));
      onTeam(k::worthThreads(static_cast<std::int64_t>(n) * C), [&] {
        if (g.ptr[0] && !wteTrainable) {
          k::gemm(true, false, V, C, n, 1.0f, logits, V, lnf, C, 0.0f, g.ptr[0], C);
#pragma omp barrier
        }
        k::embeddingBackward(g.ptr[0], g.ptr[1], dres, inputs, batch, T, C);
      });
      finishGrads(src, 0, g);
    }
    return loss;
  }
};

Gpt2::Gpt2(const Gpt2Shape& shape, Gpt2Options options, Device& device, int maxBatch)
    : impl_(std::make_unique<Impl>(shape, options, device, maxBatch)) {}

Gpt2::~Gpt2() = default;

double Gpt2::forwardBackward(ParameterSource& src, const std::uint8_t* inputs,
                             const std::uint8_t* targets, int batch, double seed) {
  return impl_->run(src, inputs, targets, batch, seed, Impl::Mode::Train, nullptr);
}

double Gpt2::loss(ParameterSource& src, const std::uint8_t* inputs, const std::uint8_t* targets,
                  int batch) {
  return impl_->run(src, inputs, targets, batch, 0.0, Impl::Mode::Loss, nullptr);
}

std::vector<float> Gpt2::logits(ParameterSource& src, const std::uint8_t* inputs, int batch) {
  std::vector<float> out(static_cast<std::size_t>(batch > 0 ? batch : 0) * impl_->T * impl_->V);
  impl_->run(src, inputs, nullptr, batch, 0.0, Impl::Mode::Logits, out.data());
  return out;
}

double Gpt2::flopsPerToken() const {
  // 6 per weight per token (2 forward, 4 backward) for every matrix product's weights, the tied
  // head included, as nanoGPT and the PaLM paper count. Attention's QK^T and PV as causal
  // attention needs them: token t of a sequence scores and weights t + 1 positions, (T + 1) / 2
  // on average, so 2 x 2 C (T + 1) / 2 per layer forward and three times that with backward.
  // (PaLM's 12 L C T counts the whole T x T, as an implementation that masks after computing
  // it does; the kernels compute only the blocks on and below the diagonal, and the figure is
  // the model's work, not an implementation's.)
  const double L = impl_->L, C = impl_->C, T = impl_->T, V = impl_->V;
  const double attention = 6.0 * L * C * (T + 1);
  const LoraConfig& lora = impl_->options.lora;
  if (!lora.enabled()) return 6.0 * (12.0 * L * C * C + V * C) + attention;
  // Frozen weights: forward and the input gradient, 4 per weight; each adapter's r (in + out)
  // parameters cost 6 as any trained weight.
  double adapters = 0;
  for (LoraTarget t : lora.targets)
    adapters += static_cast<double>(lora.rank) * static_cast<double>(inFeatures(t, impl_->C) + outFeatures(t, impl_->C));
  return 4.0 * (12.0 * L * C * C + V * C) + 6.0 * L * adapters + attention;
}

}  // namespace zrt::trainer
