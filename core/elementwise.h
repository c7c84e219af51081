// Element-wise device kernels written once: the body of each kernel (elementwiseAt) is one
// function over element i that every backend runs. Device::launch queues it on a stream: the
// host devices run it on the stream's thread (the strict device through its private alias of
// device memory), the CUDA device as a __global__ kernel (core/cuda/elementwise_kernels.cu),
// each with its own way of loading and storing one element and of doing one float or double
// operation (Access): the host in plain C++ built with -ffp-contract=off, CUDA with the
// explicitly rounded intrinsics, so nothing is fused that the body keeps apart and the backends
// store the same bits. Conversions round to nearest even as core/dtype.h.
// The family: fills, casts, scaling and averaging, accumulation, the loss scale's unscale with
// its overflow flag, the gradient norm's partial sums and their reduction, and the Adam/AdamW
// and SGD steps (the operation order of runtime/optim/kernel_args.h, which the runtime's CPU paths follow,
// so a launch gives their bits).
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"

#if defined(__CUDACC__)
#define ZRT_HOST_DEVICE __host__ __device__
#else
#define ZRT_HOST_DEVICE
#endif

namespace zrt {

enum class ElementwiseOp : int {
  Fill,   // out[i] = value, rounded once to out's type
  Cast,   // out[i] = in[i], widened exactly to fp32 and rounded once to out's type
  Scale,  // out[i] = in[i] * value in fp32, rounded once to out's type
  // out[i] = in[i] / value in fp32, rounded once: core/element_arithmetic.h's divideBy, which
  // keeps an average of equal values exact (never a multiply by a rounded reciprocal).
  Divide,
  // out[i] = out[i] + in[i] in fp32, rounded once to out's type: element_arithmetic.h's sumPair
  // (same types) and widenInto with add (out fp32, in 16-bit).
  Add,
  // out[i] = out[i] + in[i] / value in fp32, rounded once: element_arithmetic.h's addDivided,
  // a micro-step's averaged gradients added into a shard.
  AddDivided,
  // out[i] = in[i] * value in fp32, rounded once; the int32 at `flag` (device memory) becomes 1
  // when in[i] is inf or NaN and is otherwise left alone, so it can be cleared once and shared by
  // several launches: a loss scale's unscale and its overflow check in one pass.
  Unscale,
  // Element c is chunk c of `in` (kSumSquaresChunk elements of inType, `extent` in all): its sum
  // of squares in double, in runtime/grad_norm.cpp's order (8 interleaved partial sums), stored
  // at partials[c]. Count = sumSquaresChunks(extent).
  SumSquares,
  // One element (count 1): the `extent` doubles at `partials` added in order from 0, stored as
  // {sum, 1 if the sum is not finite else 0} at out (two doubles): runtime/grad_norm.h's NormPart.
  ReduceSquares,
  // One Adam/AdamW step of element i: param/expAvg/expAvgSq (fp32) and the gradient `in` of
  // inType, with the coefficients `adam`; out, when given, receives the updated parameter in
  // outType. runtime/optim/kernel_args.h fixes the operations and their order.
  AdamStep,
  // One SGD step of element i (PyTorch's: weight decay, momentum with dampening, Nesterov):
  // param and, with momentum, its buffer (fp32) and the gradient `in` of inType, with the
  // coefficients `sgd`; out, when given, receives the updated parameter in outType.
  // runtime/optim/kernel_args.h fixes the operations and their order.
  SgdStep,
};
std::string_view nameOf(ElementwiseOp op);

// The gradient norm's chunk: runtime/grad_norm.cpp adds chunks of this size in chunk order, so
// the norm has the same bits however the chunks are spread over threads.
inline constexpr std::size_t kSumSquaresChunk = std::size_t{1} << 16;
ZRT_HOST_DEVICE inline std::size_t sumSquaresChunks(std::size_t extent) {
  return (extent + kSumSquaresChunk - 1) / kSumSquaresChunk;
}

// An Adam step's float coefficients, computed once on the host (runtime/optim's
// adamCoefficients) so every backend multiplies by the very same floats. mode: 0 no weight
// decay, 1 L2 (Adam), 2 decoupled (AdamW), as runtime/optim/kernel_args.h's AdamMode.
struct AdamStepCoeffs {
  float gradScale = 1;
  float weightDecay = 0;
  float decay = 1;
  float beta1 = 0;
  float oneMinusBeta1 = 1;
  float beta2 = 0;
  float oneMinusBeta2 = 1;
  float biasCorrection2Sqrt = 1;
  float eps = 0;
  float negStepSize = 0;
  std::int32_t mode = 0;
};

// An SGD step's float coefficients, computed once on the host (runtime/optim's
// sgdCoefficients). momentumMode: 0 none, 1 the first step's (the buffer becomes the gradient),
// 2 the update, as runtime/optim/kernel_args.h's SgdMomentum.
struct SgdStepCoeffs {
  float gradScale = 1;
  float weightDecay = 0;
  float momentum = 0;
  float oneMinusDampening = 1;
  float negLr = 0;
  std::int32_t hasWeightDecay = 0;
  std::int32_t momentumMode = 0;
  std::int32_t nesterov = 0;
};

// One launch: `count` elements of `out` (and of `in`). in and out may be the same buffer only
// when their types have the same size. Every pointer is device memory.
struct ElementwiseArgs {
  ElementwiseOp op = ElementwiseOp::Fill;
  std::size_t count = 0;
  DType outType = DType::F32;
  void* out = nullptr;
  DType inType = DType::F32;
  const void* in = nullptr;
  float value = 0;
  std::int32_t* flag = nullptr;  // Unscale
  double* partials = nullptr;    // SumSquares (written), ReduceSquares (read)
  std::size_t extent = 0;        // SumSquares: elements of in; ReduceSquares: partials
  // AdamStep: param, expAvg, expAvgSq; SgdStep: param and, with momentum, its buffer.
  float* state[3] = {nullptr, nullptr, nullptr};
  AdamStepCoeffs adam;
  SgdStepCoeffs sgd;
};

inline ElementwiseArgs fillArgs(DType t, void* out, std::size_t count, float value) {
  ElementwiseArgs a;
  a.op = ElementwiseOp::Fill;
  a.count = count;
  a.outType = t;
  a.out = out;
  a.value = value;
  return a;
}

// out = op(in) for the one-input ops (Cast, Scale, Divide, Add, AddDivided, Unscale).
inline ElementwiseArgs unaryArgs(ElementwiseOp op, DType outType, void* out, DType inType,
                                 const void* in, std::size_t count, float value = 0) {
  ElementwiseArgs a;
  a.op = op;
  a.count = count;
  a.outType = outType;
  a.out = out;
  a.inType = inType;
  a.in = in;
  a.value = value;
  return a;
}

inline ElementwiseArgs castArgs(DType outType, void* out, DType inType, const void* in,
                                std::size_t count) {
  return unaryArgs(ElementwiseOp::Cast, outType, out, inType, in, count);
}

inline ElementwiseArgs unscaleArgs(DType outType, void* out, DType inType, const void* in,
                                   std::size_t count, float multiplier, std::int32_t* flag) {
  ElementwiseArgs a =
      unaryArgs(ElementwiseOp::Unscale, outType, out, inType, in, count, multiplier);
  a.flag = flag;
  return a;
}

// partials must hold sumSquaresChunks(count) doubles.
inline ElementwiseArgs sumSquaresArgs(DType t, const void* in, std::size_t count,
                                      double* partials) {
  ElementwiseArgs a;
  a.op = ElementwiseOp::SumSquares;
  a.count = sumSquaresChunks(count);
  a.inType = t;
  a.in = in;
  a.extent = count;
  a.partials = partials;
  return a;
}

// out: two doubles in device memory.
inline ElementwiseArgs reduceSquaresArgs(const double* partials, std::size_t chunks, double* out) {
  ElementwiseArgs a;
  a.op = ElementwiseOp::ReduceSquares;
  a.count = 1;
  a.outType = DType::F32;  // unused: out holds doubles
  a.out = out;
  a.partials = const_cast<double*>(partials);
  a.extent = chunks;
  return a;
}

// An optimizer step's launch over param and its states (fp32), the gradient of gradType, and
// the updated parameter's copy in copyType (copy may be null: no copy).
inline ElementwiseArgs optimizerStepArgs(ElementwiseOp op, float* param, float* state1,
                                         float* state2, DType gradType, const void* grad,
                                         std::size_t count, DType copyType, void* copy) {
  ElementwiseArgs a;
  a.op = op;
  a.count = count;
  a.outType = copyType;
  a.out = copy;
  a.inType = gradType;
  a.in = grad;
  a.state[0] = param;
  a.state[1] = state1;
  a.state[2] = state2;
  return a;
}

inline ElementwiseArgs adamStepArgs(const AdamStepCoeffs& c, float* param, float* expAvg,
                                    float* expAvgSq, DType gradType, const void* grad,
                                    std::size_t count, DType copyType, void* copy) {
  ElementwiseArgs a = optimizerStepArgs(ElementwiseOp::AdamStep, param, expAvg, expAvgSq,
                                        gradType, grad, count, copyType, copy);
  a.adam = c;
  return a;
}

// momentum may be null (SGD without momentum).
inline ElementwiseArgs sgdStepArgs(const SgdStepCoeffs& c, float* param, float* momentum,
                                   DType gradType, const void* grad, std::size_t count,
                                   DType copyType, void* copy) {
  ElementwiseArgs a = optimizerStepArgs(ElementwiseOp::SgdStep, param, momentum, nullptr,
                                        gradType, grad, count, copyType, copy);
  a.sgd = c;
  return a;
}

// The bytes of device memory a launch reads or writes through each of its pointers (what the
// strict device checks and translates): {out, in, flag, partials, state[0..states)}; 0 for a
// pointer the op does not use.
struct ElementwiseExtents {
  std::size_t out = 0, in = 0, flag = 0, partials = 0, state = 0;
  int states = 0;  // how many of state[] the op uses, each `state` bytes
};
ElementwiseExtents extentsOf(const ElementwiseArgs& a);

// The kernel body, written once: element i of the launch `a`. Access provides load and store of
// one element of a DType, isfinite, and the float (fmul, fadd, fdiv, fsqrt, ffma) and double
// (dmul, dadd) operations, each rounded once.
template <class Access>
ZRT_HOST_DEVICE inline void elementwiseAt(const ElementwiseArgs& a, std::int64_t i) {
  switch (a.op) {
    case ElementwiseOp::Fill:
      Access::store(a.outType, a.out, i, a.value);
      break;
    case ElementwiseOp::Cast:
      Access::store(a.outType, a.out, i, Access::load(a.inType, a.in, i));
      break;
    case ElementwiseOp::Scale:
      Access::store(a.outType, a.out, i, Access::fmul(Access::load(a.inType, a.in, i), a.value));
      break;
    case ElementwiseOp::Divide:
      Access::store(a.outType, a.out, i, Access::fdiv(Access::load(a.inType, a.in, i), a.value));
      break;
    case ElementwiseOp::Add:
      Access::store(
          a.outType, a.out, i,
          Access::fadd(Access::load(a.inType, a.in, i), Access::load(a.outType, a.out, i)));
      break;
    case ElementwiseOp::AddDivided:
      Access::store(a.outType, a.out, i,
                    Access::fadd(Access::load(a.outType, a.out, i),
                                 Access::fdiv(Access::load(a.inType, a.in, i), a.value)));
      break;
    case ElementwiseOp::Unscale: {
      const float x = Access::load(a.inType, a.in, i);
      if (!Access::isfinite(x))
        *a.flag = 1;  // every writer stores the same 1: no race on the value
      Access::store(a.outType, a.out, i, Access::fmul(x, a.value));
      break;
    }
    case ElementwiseOp::SumSquares: {
      const std::int64_t first = i * static_cast<std::int64_t>(kSumSquaresChunk);
      std::int64_t n = static_cast<std::int64_t>(a.extent) - first;
      if (n > static_cast<std::int64_t>(kSumSquaresChunk))
        n = static_cast<std::int64_t>(kSumSquaresChunk);
      constexpr int kLanes = 8;
      double lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::int64_t k = 0;
      for (; k + kLanes <= n; k += kLanes)
        for (int l = 0; l < kLanes; ++l) {
          const double v = Access::load(a.inType, a.in, first + k + l);
          lane[l] = Access::dadd(lane[l], Access::dmul(v, v));
        }
      for (; k < n; ++k) {
        const double v = Access::load(a.inType, a.in, first + k);
        lane[0] = Access::dadd(lane[0], Access::dmul(v, v));
      }
      double sum = 0;
      for (int l = 0; l < kLanes; ++l) sum = Access::dadd(sum, lane[l]);
      a.partials[i] = sum;
      break;
    }
    case ElementwiseOp::ReduceSquares: {
      double sum = 0;
      for (std::size_t c = 0; c < a.extent; ++c) sum = Access::dadd(sum, a.partials[c]);
      double* out = static_cast<double*>(a.out);
      out[0] = sum;
      out[1] = Access::isfinite(sum) ? 0.0 : 1.0;
      break;
    }
    case ElementwiseOp::AdamStep: {
      const AdamStepCoeffs& c = a.adam;
      float g = Access::fmul(Access::load(a.inType, a.in, i), c.gradScale);
      float p = a.state[0][i];
      float m = a.state[1][i];
      float v = a.state[2][i];
      if (c.mode == 1) g = Access::ffma(p, c.weightDecay, g);
      if (c.mode == 2) p = Access::fmul(p, c.decay);
      m = Access::ffma(g, c.oneMinusBeta1, Access::fmul(m, c.beta1));
      v = Access::ffma(Access::fmul(c.oneMinusBeta2, g), g, Access::fmul(v, c.beta2));
      const float denom =
          Access::fadd(Access::fdiv(Access::fsqrt(v), c.biasCorrection2Sqrt), c.eps);
      p = Access::fadd(p, Access::fdiv(Access::fmul(c.negStepSize, m), denom));
      a.state[0][i] = p;
      a.state[1][i] = m;
      a.state[2][i] = v;
      if (a.out) Access::store(a.outType, a.out, i, p);
      break;
    }
    case ElementwiseOp::SgdStep: {
      const SgdStepCoeffs& c = a.sgd;
      float g = Access::fmul(Access::load(a.inType, a.in, i), c.gradScale);
      float p = a.state[0][i];
      if (c.hasWeightDecay) g = Access::ffma(p, c.weightDecay, g);
      if (c.momentumMode != 0) {
        float buf = g;
        if (c.momentumMode == 2)
          buf = Access::ffma(g, c.oneMinusDampening, Access::fmul(a.state[1][i], c.momentum));
        a.state[1][i] = buf;
        g = c.nesterov ? Access::ffma(buf, c.momentum, g) : buf;
      }
      p = Access::ffma(g, c.negLr, p);
      a.state[0][i] = p;
      if (a.out) Access::store(a.outType, a.out, i, p);
      break;
    }
  }
}

// Throws InvalidArgument naming the op when `a` cannot run (a buffer it needs is null).
void checkElementwise(const ElementwiseArgs& a);

// Runs the launch over every element on the calling thread, through core/dtype.h's conversions:
// what a host device's stream thread runs.
void runElementwiseOnHost(const ElementwiseArgs& a);

}  // namespace zrt
