// Plain data the optimizer kernels take (CPU paths and the CUDA kernel alike): one step's
// coefficients, computed once on the host in double and rounded to float so that every path
// multiplies by the very same floats, and the arrays of the range being updated.
// This header also fixes the per-element operation order that every path follows (see
// docs/optim.md): the scalar path, each SIMD path and the CUDA kernel perform the same IEEE
// float operations in the same order, with fma only where written here, so they agree bit for
// bit. The order mirrors what PyTorch 1.13's CPU kernels do for torch.optim.Adam/AdamW/SGD.
// Plain data; no thread-safety concerns.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace zrt::optim {

// How weight decay enters Adam.
enum class AdamMode : std::int32_t {
  Plain = 0,      // no weight decay
  L2 = 1,         // Adam: g = fma(p, weightDecay, g)
  Decoupled = 2,  // AdamW: p = p * decay, decay = 1 - lr * weightDecay
};

// Adam/AdamW, per element, in float (fma(a, b, c) = a*b + c rounded once; / and sqrt correctly
// rounded):
//   g = grad * gradScale                      grad converted exactly from fp32/fp16/bf16
//   L2:        g = fma(p, weightDecay, g)
//   Decoupled: p = p * decay
//   m = fma(g, oneMinusBeta1, m * beta1)
//   v = fma(oneMinusBeta2 * g, g, v * beta2)
//   p = p + (negStepSize * m) / (sqrt(v) / biasCorrection2Sqrt + eps)
//   copy = convert(p)                         fp32, fp16 or bf16, round to nearest even
struct AdamCoeffs {
  float gradScale;
  float weightDecay;
  float decay;
  float beta1;
  float oneMinusBeta1;
  float beta2;
  float oneMinusBeta2;
  float biasCorrection2Sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float negStepSize;  // -lr / (1 - beta1^step)
  AdamMode mode;
};

// SGD (PyTorch semantics), per element, in float:
//   g = grad * gradScale
//   hasWeightDecay: g = fma(p, weightDecay, g)
//   momentum (MomentumInit on the first step, MomentumUpdate after):
//     init:   buf = g
//     update: buf = fma(g, oneMinusDampening, buf * momentum)
//     g = nesterov ? fma(buf, momentum, g) : buf
//   p = fma(g, negLr, p)
//   copy = convert(p)
enum class SgdMomentum : std::int32_t { None = 0, Init = 1, Update = 2 };

struct SgdCoeffs {
  float gradScale;
  float weightDecay;
  float momentum;
  float oneMinusDampening;
  float negLr;
  std::int32_t hasWeightDecay;
  SgdMomentum momentumMode;
  std::int32_t nesterov;
};

// Which copy of the updated parameter is written, if any.
enum class CopyKind : std::int32_t { None = -1, F32 = 0, F16 = 1, BF16 = 2 };

inline CopyKind copyKindOf(const void* copy, DType type) {
  return copy == nullptr ? CopyKind::None : static_cast<CopyKind>(static_cast<int>(type));
}

// Arrays of one tensor or shard, indexed by element from the same origin.
struct AdamArrays {
  float* param;
  float* expAvg;
  float* expAvgSq;
  const void* grad;
  void* copy;
  DType gradType;
  CopyKind copyKind;
};

struct SgdArrays {
  float* param;
  float* momentum;  // unused when SgdCoeffs::momentumMode is None
  const void* grad;
  void* copy;
  DType gradType;
  CopyKind copyKind;
};

}  // namespace zrt::optim
