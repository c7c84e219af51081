// GPT-2's forward and backward over a ParameterSource: the module protocol (parameters, release,
// gradients, backwardDone in the order the Engine expects), activation checkpointing, and where
// each phase runs (in place, as a host kernel on the compute stream, or as GpuLayers' CUDA
// phase). The arithmetic is in gpt2_kernels.cpp (host) and cuda/ (GPU); the buffers' plan in
// gpt2_buffers.h.
#include "tools/trainer/model/gpt2.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/build_config.h"
#include "core/error.h"
#include "core/log.h"
#include "tools/trainer/model/blas_core.h"
#include "tools/trainer/model/gpt2_buffers.h"
#include "tools/trainer/model/gpt2_gpu_layers.h"
#include "tools/trainer/model/gpt2_kernels.h"

namespace zrt::trainer {

namespace k = kernels;

namespace {

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
  // The team of every parallel region, whichever thread runs the kernels: the constructing
  // thread's count (the rank's share of the cores, zrt-train's threads.h). A device's stream
  // thread (the strict device runs the layers there) would otherwise take OpenMP's default, the
  // whole machine, and split the rows, so sum them in another order, than the host run does.
  const int team = omp_get_max_threads();
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
  // Where the layers run: in place on the calling thread when the host reads the device's
  // memory (`host`: a stream's thread would only cost the OpenMP pool its warm threads); as host
  // kernels on `computeStream` (execute), which reach device memory only through the addresses
  // a launch hands them, on the strict device; as `gpu`'s CUDA phases on a GPU.
  bool inPlace;

  DeviceMemory deviceActs, pinnedActs, wideParams, wideGrads;
  std::unique_ptr<Stream> stream;  // offloaded checkpoints' copies
  std::unique_ptr<Stream> computeStream;
  std::unique_ptr<GpuLayers> gpu;  // after computeStream: its cuBLAS handle works on that stream

  Impl(const Gpt2Shape& s, Gpt2Options o, Device& d, int mb)
      : shape(s), options(o), device(d), maxBatch(mb), inPlace(d.hostReadsDeviceMemory()) {
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
    if (!inPlace) computeStream = device.createStream();
    if (d.kind() == DeviceKind::Cuda) {
#if ZRT_HAVE_CUDA
      Gpt2LayerShape ls{L, C, H, T, V, {}, o.lora.rank, loraScale, wteTrainable};
      std::copy(std::begin(loraA), std::end(loraA), ls.loraA.begin());
      gpu = makeCudaLayers(ls, device, *computeStream);
#else
      ZRT_THROW(InvalidArgument, "gpt2: ", d.name(), " needs a build with CUDA");
#endif
    }
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
    const std::size_t n = static_cast<std::size_t>(maxBatch) * T;
    if (gpu) {
      onGpu([&] { device.launch(fillArgs(DType::F32, ones, n, 1.0f), *computeStream); });
      return;
    }
    compute("gpt2 set-up", 0, {}, {}, [&](const ActivationBuffers& A, const auto&, const auto&) {
      std::fill(A.ones, A.ones + n, 1.0f);
    });
  }

  // One phase of the model, run to completion: on a GPU `gpuPhase` queues GpuLayers' CUDA phase,
  // elsewhere `hostPhase`(A, p, g) runs through compute().
  template <class G, class H>
  void phase(const char* what, std::size_t m, const std::vector<const float*>& p, const std::vector<float*>& g,
             const G& gpuPhase, const H& hostPhase) {
    if (gpu) return onGpu(gpuPhase);
    compute(what, m, p, g, hostPhase);
  }

  // Runs a GPU phase, queued by `queue` on the compute stream, and waits for it, as execute()
  // does a host one.
  template <class F>
  void onGpu(const F& queue) {
    queue();
    computeStream->synchronize();
  }

  // Runs kernel(addresses of `buffers`) to completion where the layers run: in place, or as a
  // host kernel on the compute stream, waited for (so `kernel` may capture the caller's locals,
  // and a module's parameters and gradients are final once it returns, as release() and
  // backwardDone() need).
  void execute(const char* what, std::vector<Device::KernelBuffer> buffers,
               const Device::HostKernel& kernel) {
    if (inPlace) {
      std::vector<void*> addresses;
      addresses.reserve(buffers.size());
      for (const auto& b : buffers) addresses.push_back(const_cast<void*>(b.data));
      kernel(addresses);
      return;
    }
    device.launchHost(what, std::move(buffers), kernel, *computeStream);
    computeStream->synchronize();
  }

  // A copy between host and device memory, finished when it returns.
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (inPlace) {
      std::memcpy(dst, src, bytes);
      return;
    }
    device.copyAsync(dst, src, bytes, *computeStream);
    computeStream->synchronize();
  }

  // The activation plan carved at `base`, the address a host kernel reaches deviceActs by.
  ActivationBuffers at(float* base) const {
    ActivationBuffers r;
    Carver dev, pinned;
    r.carve(shape, options, maxBatch, wteTrainable, dev, pinned);
    dev.assign(base);
    if (pinnedActs) pinned.assign(pinnedActs.as<float>());
    return r;
  }

  // f(A, p, g) to completion (execute): A the activation buffers, p and g module m's parameters
  // and gradients (fp32; a null gradient stays null), all as the running thread reaches them.
  template <class F>
  void compute(const char* what, std::size_t m, const std::vector<const float*>& p,
               const std::vector<float*>& g, const F& f) {
    std::vector<Device::KernelBuffer> buffers{{deviceActs.data(), deviceActs.bytes()}};
    for (std::size_t i = 0; i < p.size(); ++i) buffers.push_back({p[i], numels[m][i] * sizeof(float)});
    for (std::size_t i = 0; i < g.size(); ++i) buffers.push_back({g[i], g[i] ? numels[m][i] * sizeof(float) : 0});
    execute(what, std::move(buffers), [&](const std::vector<void*>& a) {
      ActivationBuffers moved;
      const ActivationBuffers* A = this;
      if (!inPlace) {
        moved = at(static_cast<float*>(a[0]));
        A = &moved;
      }
      std::vector<const float*> pa(p.size());
      std::vector<float*> ga(g.size());
      for (std::size_t i = 0; i < p.size(); ++i) pa[i] = static_cast<const float*>(a[1 + i]);
      for (std::size_t i = 0; i < g.size(); ++i) ga[i] = static_cast<float*>(a[1 + p.size() + i]);
      f(*A, pa, ga);
    });
  }

  float* x(const ActivationBuffers& A, int k) const { return options.checkpointOffload ? A.res[k % 2] : A.res[k]; }
  const BlockActs& acts(const ActivationBuffers& A, int block) const {
    return options.activationCheckpointing ? A.blocks[0] : A.blocks[block];
  }

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

  // 16-bit tensors to or from their fp32 copies in a scratch, in one kernel: `wide[i]` is the
  // fp32 side of refs[i] (skipped where null or where refs[i] is fp32 itself).
  void convert(const char* what, const std::vector<TensorRef>& refs, const std::vector<float*>& wide,
               bool widen) {
    std::vector<Device::KernelBuffer> buffers;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < refs.size(); ++i) {
      if (!wide[i] || !refs[i].data || refs[i].dtype == DType::F32) continue;
      which.push_back(i);
      buffers.push_back({refs[i].data, refs[i].numel * sizeof(std::uint16_t)});
      buffers.push_back({wide[i], refs[i].numel * sizeof(float)});
    }
    if (which.empty()) return;
    if (gpu) {
      onGpu([&] {
        for (std::size_t i : which) {
          const TensorRef& r = refs[i];
          device.launch(widen ? unaryArgs(ElementwiseOp::Cast, DType::F32, wide[i], r.dtype, r.data, r.numel)
                              : unaryArgs(ElementwiseOp::Cast, r.dtype, r.data, DType::F32, wide[i], r.numel),
                        *computeStream);
        }
      });
      return;
    }
    execute(what, std::move(buffers), [&](const std::vector<void*>& a) {
      for (std::size_t w = 0; w < which.size(); ++w) {
        const TensorRef& r = refs[which[w]];
        auto* bits = static_cast<std::uint16_t*>(a[2 * w]);
        float* f = static_cast<float*>(a[2 * w + 1]);
        const auto count = static_cast<std::int64_t>(r.numel);
        const bool bf16 = r.dtype == DType::BF16;
        if (widen) {
#pragma omp parallel for schedule(static) if (k::worthThreads(count)) num_threads(team)
          for (std::int64_t j = 0; j < count; ++j) f[j] = bf16 ? bf16ToFloat(bits[j]) : halfToFloat(bits[j]);
        } else {
#pragma omp parallel for schedule(static) if (k::worthThreads(count)) num_threads(team)
          for (std::int64_t j = 0; j < count; ++j) bits[j] = bf16 ? floatToBf16(f[j]) : floatToHalf(f[j]);
        }
      }
    });
  }

  // Module m's parameters as fp32: the source's own memory when it holds fp32, else widened
  // into a scratch shared by all modules (one module is read at a time).
  std::vector<const float*> params(ParameterSource& src, std::size_t m) {
    const std::vector<TensorRef> refs = src.parameters(m);
    checkRefs(m, refs, "parameters");
    std::vector<const float*> out(refs.size());
    std::vector<float*> wide(refs.size(), nullptr);
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
      wide[i] = wideScratch(wideParams) + offset;
      offset += roundUp(r.numel);
      out[i] = wide[i];
    }
    convert("gpt2 parameter widening", refs, wide, true);
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
    convert("gpt2 gradient rounding", g.refs, g.ptr, false);
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
  void onTeam(bool parallel, const F& f) const {
#pragma omp parallel if (parallel) num_threads(team)
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
  void adapt(LoraTarget t, const BlockActs& a, const std::vector<const float*>& p, const float* x, float* y,
             k::Span rows) const {
    const int ia = loraA[static_cast<int>(t)];
    if (ia < 0) return;
    k::loraForward(y, a.loraU[static_cast<int>(t)], x, p[ia], p[ia + 1], loraScale, rows,
                   static_cast<int>(inFeatures(t, C)), static_cast<int>(outFeatures(t, C)), options.lora.rank);
  }

  // Target t's adapter backward from its layer's output gradient dy: dx (the layer's input
  // gradient, already holding the base layer's part, on this thread's rows) gains the adapter's
  // part. Every row of dy must be final; it has a barrier inside (all threads reach it, as every
  // thread sees the same targets).
  void adaptBack(LoraTarget t, const ActivationBuffers& A, const BlockActs& a, const std::vector<const float*>& p,
                 const std::vector<float*>& g, const float* dy, const float* x, float* dx, int n,
                 k::Span rows) const {
    const int ia = loraA[static_cast<int>(t)];
    if (ia < 0) return;
    const int in = static_cast<int>(inFeatures(t, C)), out = static_cast<int>(outFeatures(t, C));
    const int r = options.lora.rank;
    k::loraDu(A.loraDu, dy, p[ia + 1], loraScale, rows, out, r);
#pragma omp barrier
    k::loraParamGrads(g[ia], g[ia + 1], dy, x, a.loraU[static_cast<int>(t)], A.loraDu, loraScale, n,
                      in, out, r);
    k::loraInputGrad(dx, A.loraDu, p[ia], rows, in, r);
  }

  // On every thread of a region (blockWorthThreads).
  void blockForward(const BlockActs& a, const std::vector<const float*>& p, const float* in,
                    float* out, int batch) const {
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

  // On every thread of a region. A.dres holds d loss / d (block output) on entry and d loss /
  // d (block input) on return. Between barriers, what a phase's weight gradients read (every
  // row) is what no thread writes in that phase.
  void blockBackward(const ActivationBuffers& A, const BlockActs& a, const std::vector<const float*>& p,
                     const std::vector<float*>& g, const float* in, int batch) const {
    const int n = batch * T;
    const Share s = share(batch);
    k::linearParamGrads(g[kFcProjW], g[kFcProjB], A.dres, a.fchg, A.ones, n, 4 * C, C);
    k::linearInputGrad(A.dfch, A.dres, p[kFcProjW], s.rows, 4 * C, C, false);
    adaptBack(LoraTarget::MlpProj, A, a, p, g, A.dres, a.fchg, A.dfch, n, s.rows);
    k::geluBackward(A.dfch, a.fch, s.rows, 4 * C);
#pragma omp barrier
    k::linearParamGrads(g[kFcW], g[kFcB], A.dfch, a.ln2, A.ones, n, C, 4 * C);
    k::linearInputGrad(A.dln, A.dfch, p[kFcW], s.rows, C, 4 * C, false);
    adaptBack(LoraTarget::Fc, A, a, p, g, A.dfch, a.ln2, A.dln, n, s.rows);
    k::layerNormBackward(A.dres, A.lnTmp, A.dln, a.xmid, p[kLn2W], a.mean2, a.rstd2, s.rows, C);
#pragma omp barrier
    k::layerNormParamGrads(g[kLn2W], g[kLn2B], A.dln, A.lnTmp, A.ones, n, C);
    k::linearParamGrads(g[kProjW], g[kProjB], A.dres, a.atty, A.ones, n, C, C);
    k::linearInputGrad(A.datty, A.dres, p[kProjW], s.rows, C, C, false);
    adaptBack(LoraTarget::Proj, A, a, p, g, A.dres, a.atty, A.datty, n, s.rows);
    if (!s.wholeSequences) {
#pragma omp barrier
    }
    k::attentionBackward(A.dqkv, A.datt, A.datty, a.qkv, a.att, s.pairs, T, C, H);
#pragma omp barrier
    k::linearParamGrads(g[kAttnW], g[kAttnB], A.dqkv, a.ln1, A.ones, n, C, 3 * C);
    k::linearInputGrad(A.dln, A.dqkv, p[kAttnW], s.rows, C, 3 * C, false);
    adaptBack(LoraTarget::Qkv, A, a, p, g, A.dqkv, a.ln1, A.dln, n, s.rows);
    k::layerNormBackward(A.dres, A.lnTmp, A.dln, in, p[kLn1W], a.mean1, a.rstd1, s.rows, C);
#pragma omp barrier
    k::layerNormParamGrads(g[kLn1W], g[kLn1B], A.dln, A.lnTmp, A.ones, n, C);
  }

  enum class Mode { Train, Loss, Logits };

  // Module m's parameters are released once the layers reading them have finished (execute
  // waits for them).
  double run(ParameterSource& src, const std::uint8_t* inputs, const std::uint8_t* targets,
             int batch, double seed, Mode mode, float* logitsOut) {
    checkBatch(inputs, targets, batch);
    const int n = batch * T;
    const std::size_t ncBytes = static_cast<std::size_t>(n) * C * sizeof(float);
    const bool train = mode == Mode::Train;
    const bool offload = options.checkpointOffload;
    const std::size_t lnfModule = static_cast<std::size_t>(L) + 1;
    const bool elementwiseThreads = k::worthThreads(static_cast<std::int64_t>(n) * C);

    copy(this->inputs(), inputs, static_cast<std::size_t>(n));
    if (targets) copy(this->targets(), targets, static_cast<std::size_t>(n));
    {
      const auto p = params(src, 0);
      phase("gpt2 embedding forward", 0, p, {},
            [&] { gpu->embeddingForward(*this, x(*this, 0), p, batch); },
            [&](const ActivationBuffers& A, const auto& pa, const auto&) {
        onTeam(elementwiseThreads,
               [&] { k::embeddingForward(x(A, 0), A.inputs(), pa[0], pa[1], share(batch).rows, T, C); });
      });
      src.release(0);
    }
    for (int b = 0; b < L; ++b) {
      if (offload && train) {
        // x(b + 1) reuses the slot of x_{b-1}, whose copy out was queued one block ago; x_b's
        // copy overlaps this block's compute.
        stream->synchronize();
        device.copyAsync(resHost[b], x(*this, b), ncBytes, *stream);
      }
      const auto p = params(src, b + 1);
      phase("gpt2 block forward", b + 1, p, {},
            [&] { gpu->blockForward(*this, acts(*this, b), p, x(*this, b), x(*this, b + 1), batch); },
            [&](const ActivationBuffers& A, const auto& pa, const auto&) {
        onTeam(blockWorthThreads(n), [&] { blockForward(acts(A, b), pa, x(A, b), x(A, b + 1), batch); });
      });
      src.release(b + 1);
    }
    {
      const auto p = params(src, lnfModule);
      phase("gpt2 ln_f forward", lnfModule, p, {},
            [&] { gpu->lnfForward(*this, x(*this, L), p, batch); },
            [&](const ActivationBuffers& A, const auto& pa, const auto&) {
        onTeam(elementwiseThreads, [&] {
          k::layerNormForward(A.lnf, A.meanf, A.rstdf, x(A, L), pa[0], pa[1], share(batch).rows, C);
        });
      });
      src.release(lnfModule);
    }

    // The head, tied to wte: forward and (training) its backward under one parameters(0).
    double loss = 0;
    {
      const auto p = params(src, 0);
      phase("gpt2 head", 0, p, {},
            [&] { gpu->head(*this, p[0], batch, seed, mode != Mode::Logits, train); },
            [&](const ActivationBuffers& A, const auto& pa, const auto&) {
        const float* wte = pa[0];
        onTeam(k::worthThreads(n, V, C), [&] {
          k::gemm(false, true, n, V, C, 1.0f, A.lnf, C, wte, C, 0.0f, A.logits, V);
          if (mode == Mode::Logits) return;
#pragma omp barrier
          const k::Span rows = share(batch).rows;
          k::crossEntropyForward(A.logits, A.rowLoss, A.targets(), rows, V);
          if (!train) return;
          k::crossEntropyBackward(A.logits, A.targets(), rows, n, V, seed);
#pragma omp barrier
          k::gemm(false, false, n, C, V, 1.0f, A.logits, V, wte, C, 0.0f, A.dln, C);
          if (wteTrainable) k::gemm(true, false, V, C, n, 1.0f, A.logits, V, A.lnf, C, 0.0f, A.dwteHead, C);
        });
        if (mode != Mode::Logits) *A.loss() = k::meanLoss(A.rowLoss, n);
      });
      if (mode == Mode::Logits) {
        copy(logitsOut, logits, static_cast<std::size_t>(n) * V * sizeof(float));
        src.release(0);
        return 0;
      }
      copy(&loss, this->loss(), sizeof loss);
      src.release(0);
    }
    if (!train) return loss;

    {
      const auto p = params(src, lnfModule);
      const Grads g = openGrads(src, lnfModule);
      phase("gpt2 ln_f backward", lnfModule, p, g.ptr,
            [&] { gpu->lnfBackward(*this, x(*this, L), p, g.ptr, batch); },
            [&](const ActivationBuffers& A, const auto& pa, const auto& ga) {
        std::memset(A.dres, 0, ncBytes);
        onTeam(elementwiseThreads, [&] {
          k::layerNormBackward(A.dres, A.lnTmp, A.dln, x(A, L), pa[0], A.meanf, A.rstdf, share(batch).rows, C);
#pragma omp barrier
          k::layerNormParamGrads(ga[0], ga[1], A.dln, A.lnTmp, A.ones, n, C);
        });
      });
      finishGrads(src, lnfModule, g);
      src.release(lnfModule);
    }
    for (int b = L - 1; b >= 0; --b) {
      if (offload) {
        // x_b is on the device: the last block's input never left its slot, the others were
        // fetched one block ago. The slot of x_{b+1}, no longer needed, takes x_{b-1}.
        stream->synchronize();
        if (b >= 1) device.copyAsync(x(*this, b - 1), resHost[b - 1], ncBytes, *stream);
      }
      const auto p = params(src, b + 1);
      if (options.activationCheckpointing)
        phase("gpt2 block recomputation", b + 1, p, {},
              [&] { gpu->blockForward(*this, acts(*this, b), p, x(*this, b), nullptr, batch); },
              [&](const ActivationBuffers& A, const auto& pa, const auto&) {
          onTeam(blockWorthThreads(n), [&] { blockForward(acts(A, b), pa, x(A, b), nullptr, batch); });
        });
      const Grads g = openGrads(src, b + 1);
      phase("gpt2 block backward", b + 1, p, g.ptr,
            [&] { gpu->blockBackward(*this, acts(*this, b), p, g.ptr, x(*this, b), batch); },
            [&](const ActivationBuffers& A, const auto& pa, const auto& ga) {
        onTeam(blockWorthThreads(n), [&] { blockBackward(A, acts(A, b), pa, ga, x(A, b), batch); });
      });
      finishGrads(src, b + 1, g);
      src.release(b + 1);
    }
    {
      const Grads g = openGrads(src, 0);
      phase("gpt2 embedding backward", 0, {}, g.ptr,
            [&] { gpu->embeddingBackward(*this, g.ptr, batch); },
            [&](const ActivationBuffers& A, const auto&, const auto& ga) {
        // wte's gradient holds both its uses: the head's part, then the lookup's rows added.
        // The head's part was skipped for a wte registered frozen; a source that wants it anyway
        // gets it from the probabilities' gradient, still in `logits`.
        if (ga[0] && wteTrainable)
          std::memcpy(ga[0], A.dwteHead, static_cast<std::size_t>(V) * C * sizeof(float));
        onTeam(elementwiseThreads, [&] {
          if (ga[0] && !wteTrainable) {
            k::gemm(true, false, V, C, n, 1.0f, A.logits, V, A.lnf, C, 0.0f, ga[0], C);
#pragma omp barrier
          }
          k::embeddingBackward(ga[0], ga[1], A.dres, A.inputs(), batch, T, C);
        });
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
