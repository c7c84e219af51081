// A small model for the engine's tests, with its forward and backward written out by hand: a
// stack of `layers` modules, each h' = tanh(s ⊙ W h + b) (the last without tanh), s a frozen
// per-module scale, and the loss 0.5·mean over outputs of (y - t)², averaged over the samples
// of a micro-batch. The biases are parameter group 1 (their own lr and no weight decay).
// Samples are made from their global index alone, and the caller's samples of a step follow
// the trainer's rule (rank r in micro-step m takes samples m·micro·W + r·micro + b), so any
// world size and split into micro-batches sees the same global batch.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/element_arithmetic.h"
#include "runtime/engine.h"

namespace zrt::test {

inline constexpr int kWidth = 8;
inline constexpr int kLayers = 3;

inline float loadValue(DType t, const void* base, std::size_t i) { return zrt::loadElement(t, base, i); }
inline void storeValue(DType t, void* base, std::size_t i, float v) { zrt::storeElement(t, base, i, v); }

inline EngineModel testModel(double biasLr = -1) {
  EngineModel m;
  m.groups = {ParamGroup{}, ParamGroup{biasLr, 0.0}};
  for (int l = 0; l < kLayers; ++l) {
    ModuleSpec mod;
    mod.name = "layer" + std::to_string(l);
    mod.params.push_back({"weight", {kWidth, kWidth}, init::normal(100 + l, 0.5), true, 0});
    mod.params.push_back({"scale", {kWidth}, init::constant(1.0f), false, 0});
    mod.params.push_back({"bias", {kWidth}, init::normal(200 + l, 0.1), true, 1});
    m.modules.push_back(std::move(mod));
  }
  return m;
}

struct Sample {
  std::vector<double> x, t;
};

inline Sample sampleAt(std::int64_t index) {
  std::mt19937_64 gen(static_cast<std::uint64_t>(index) * 7919 + 17);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Sample s;
  for (int i = 0; i < kWidth; ++i) s.x.push_back(u(gen));
  for (int i = 0; i < kWidth; ++i) s.t.push_back(0.5 * u(gen));
  return s;
}

// One micro-batch through the model in double: returns the mean loss and adds
// d(mean loss)/dθ · `seed` into grads[layer][0 = weight, 1 = bias].
struct LayerParams {
  std::vector<double> w, s, b;
};

inline double forwardBackward(const std::vector<LayerParams>& p, const std::vector<Sample>& batch,
                              double seed, std::vector<std::vector<std::vector<double>>>& grads) {
  grads.assign(kLayers, {std::vector<double>(kWidth * kWidth, 0.0), std::vector<double>(kWidth, 0.0)});
  double loss = 0;
  const double n = static_cast<double>(batch.size());
  for (const Sample& smp : batch) {
    std::vector<std::vector<double>> h{smp.x}, pre;
    for (int l = 0; l < kLayers; ++l) {
      std::vector<double> z(kWidth), out(kWidth);
      for (int o = 0; o < kWidth; ++o) {
        double acc = 0;
        for (int i = 0; i < kWidth; ++i) acc += p[l].w[o * kWidth + i] * h.back()[i];
        z[o] = p[l].s[o] * acc + p[l].b[o];
        out[o] = l + 1 < kLayers ? std::tanh(z[o]) : z[o];
      }
      pre.push_back(z);
      h.push_back(out);
    }
    std::vector<double> dy(kWidth);
    for (int o = 0; o < kWidth; ++o) {
      const double d = h.back()[o] - smp.t[o];
      loss += 0.5 * d * d / kWidth / n;
      dy[o] = d / kWidth / n;
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      std::vector<double> dz(kWidth), dh(kWidth, 0.0);
      for (int o = 0; o < kWidth; ++o) {
        const double act = l + 1 < kLayers ? 1 - h[l + 1][o] * h[l + 1][o] : 1.0;
        dz[o] = dy[o] * act;
      }
      for (int o = 0; o < kWidth; ++o) {
        grads[l][1][o] += seed * dz[o];
        for (int i = 0; i < kWidth; ++i) {
          grads[l][0][o * kWidth + i] += seed * dz[o] * p[l].s[o] * h[l][i];
          dh[i] += dz[o] * p[l].s[o] * p[l].w[o * kWidth + i];
        }
      }
      dy = dh;
    }
  }
  return loss;
}

// What `fn` throws, or "" when it returns.
inline std::string messageOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Hooks for tests that interfere with a micro-step (inject an inf, skip a module).
struct TrainHooks {
  // Called with (step, micro-step, layer, weight gradient as written) before backwardDone.
  std::function<void(int, int, int, TensorRef&)> beforeDone;
  // Whether to report layer `l` in (step, micro-step); default all.
  std::function<bool(int, int, int)> report;
  int firstStep = 0;  // the number of the first step trained (samples and hooks follow it)
  // The order forward reads the layers in, by step (default 0, 1, ...): the math is the same
  // whatever the order, so a stage-3 run whose fetch order changes must still be exact.
  std::function<std::vector<int>(int)> forwardOrder;
  // Read layer 0 a second time at the end of forward (a shared module, as a tied embedding).
  bool refetchFirst = false;
  // The device the engine runs on, where the host cannot touch its memory (host-strict): the
  // model then reads parameters and writes gradients only through the device's copies, as a GPU
  // forward and backward would (beforeDone sees the gradient in host memory before it goes up).
  Device* device = nullptr;
};

// A tensor's bytes through copies on `stream` (device memory the host cannot touch) or read in
// place (null device).
struct DeviceIo {
  Device* device = nullptr;
  std::unique_ptr<Stream> stream;
  explicit DeviceIo(Device* d) : device(d), stream(d ? d->createStream() : nullptr) {}
  // A host view of `ref`'s elements: the bytes themselves, or a copy brought down into `keep`.
  const void* down(const TensorRef& ref, std::vector<char>& keep) const {
    if (!device) return ref.data;
    keep.resize(ref.numel * dtypeSize(ref.dtype));
    device->copyAsync(keep.data(), ref.data, keep.size(), *stream);
    stream->synchronize();
    return keep.data();
  }
  void up(void* dst, const std::vector<char>& src) const {
    device->copyAsync(dst, src.data(), src.size(), *stream);
    stream->synchronize();  // the engine reads the gradient once backwardDone is called
  }
};

// Reads module l's parameters (fetch, copy, release: stage 3 gathers them and frees them again).
inline LayerParams readLayer(Engine& engine, int l, const DeviceIo& io = DeviceIo(nullptr)) {
  LayerParams p;
  auto refs = engine.parameters(static_cast<std::size_t>(l));
  std::vector<char> keep[3];
  const void* at[3] = {io.down(refs[0], keep[0]), io.down(refs[1], keep[1]),
                       io.down(refs[2], keep[2])};
  for (std::size_t i = 0; i < refs[0].numel; ++i) p.w.push_back(loadValue(refs[0].dtype, at[0], i));
  for (std::size_t i = 0; i < refs[1].numel; ++i) p.s.push_back(loadValue(refs[1].dtype, at[1], i));
  for (std::size_t i = 0; i < refs[2].numel; ++i) p.b.push_back(loadValue(refs[2].dtype, at[2], i));
  engine.release(static_cast<std::size_t>(l));
  return p;
}

// Trains `steps` steps on `engine`'s model; returns the step reports.
inline std::vector<StepReport> train(Engine& engine, comm::Communicator& comm, int steps,
                                     std::int64_t micro, const TrainHooks& hooks = {},
                                     std::vector<double>* losses = nullptr) {
  const int world = comm.size(), rank = comm.rank(), accum = engine.accumulationSteps();
  const std::int64_t global = micro * accum * world;
  std::vector<StepReport> reports;
  const DeviceIo io(hooks.device);
  for (int s = hooks.firstStep; s < hooks.firstStep + steps; ++s) {
    double stepLoss = 0;
    for (int m = 0; m < accum; ++m) {
      engine.beginMicroStep();
      std::vector<LayerParams> p(kLayers);
      std::vector<int> order;
      if (hooks.forwardOrder) order = hooks.forwardOrder(s);
      for (int l = 0; l < kLayers; ++l)
        if (!hooks.forwardOrder) order.push_back(l);
      for (int l : order) p[static_cast<std::size_t>(l)] = readLayer(engine, l, io);
      if (hooks.refetchFirst) {
        const LayerParams again = readLayer(engine, 0, io);
        if (again.w != p[0].w || again.b != p[0].b)
          throw std::runtime_error("layer 0 read twice in one forward gave different values");
      }
      std::vector<Sample> batch;
      for (std::int64_t b = 0; b < micro; ++b)
        batch.push_back(sampleAt(s * global + m * micro * world + rank * micro + b));
      std::vector<std::vector<std::vector<double>>> g;
      stepLoss += forwardBackward(p, batch, engine.gradientSeed(), g);
      for (int l = kLayers - 1; l >= 0; --l) {
        if (hooks.report && !hooks.report(s, m, l)) continue;
        // Backward reads the module's parameters again, as a real backward does.
        engine.parameters(static_cast<std::size_t>(l));
        auto refs = engine.gradients(static_cast<std::size_t>(l));
        std::vector<TensorRef> onDevice = refs;
        std::vector<char> staged[3];
        if (io.device)  // computed in host memory, then uploaded as a GPU backward's result
          for (std::size_t k : {std::size_t{0}, std::size_t{2}}) {
            staged[k].resize(refs[k].numel * dtypeSize(refs[k].dtype));
            refs[k].data = staged[k].data();
          }
        for (std::size_t i = 0; i < refs[0].numel; ++i) storeValue(refs[0].dtype, refs[0].data, i, static_cast<float>(g[l][0][i]));
        for (std::size_t i = 0; i < refs[2].numel; ++i) storeValue(refs[2].dtype, refs[2].data, i, static_cast<float>(g[l][1][i]));
        if (hooks.beforeDone) hooks.beforeDone(s, m, l, refs[0]);
        if (io.device)
          for (std::size_t k : {std::size_t{0}, std::size_t{2}}) io.up(onDevice[k].data, staged[k]);
        engine.backwardDone(static_cast<std::size_t>(l));
        engine.release(static_cast<std::size_t>(l));
      }
      engine.endMicroStep();
    }
    if (losses) losses->push_back(stepLoss / accum);
    reports.push_back(engine.step());
  }
  return reports;
}

// Every trainable parameter's values, layer by layer (weight then bias).
inline std::vector<std::vector<float>> trainedValues(const Engine& engine) {
  std::vector<std::vector<float>> out;
  for (int l = 0; l < kLayers; ++l) {
    out.push_back(engine.parameterValues(static_cast<std::size_t>(l), 0));
    out.push_back(engine.parameterValues(static_cast<std::size_t>(l), 2));
  }
  return out;
}

}  // namespace zrt::test
