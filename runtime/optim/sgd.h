// SGD with momentum, dampening and Nesterov on the CPU, with PyTorch's semantics
// (torch.optim.SGD): L2 weight decay added to the gradient; on the first step the momentum
// buffer is set to the gradient, after that buf = momentum * buf + (1 - dampening) * g; Nesterov
// steps along g + momentum * buf. fp32 parameters and buffer; fp32/fp16/bf16 gradients; the
// gradient multiplier and an optional fp32/fp16/bf16 copy of the updated parameter are fused
// into the same pass, as for Adam (adam.h).
// The step number is explicit (step 1 initialises the buffer), so sub-range calls of one step
// agree. Every path gives the same bits. Thread-safety: as adam.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "runtime/optim/isa.h"
#include "runtime/optim/kernel_args.h"

namespace zrt::optim {

struct SgdHyper {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weightDecay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0, as in PyTorch
  std::int64_t step = 1;  // 1-based; step 1 initialises the momentum buffer
  double gradScale = 1.0;
};

// Views of one shard's arrays; nothing is owned. momentumBuffer may be null when momentum == 0.
struct SgdState {
  float* param = nullptr;
  float* momentumBuffer = nullptr;
  const void* grad = nullptr;
  DType gradType = DType::F32;
  void* paramCopy = nullptr;
  DType copyType = DType::F16;
  std::size_t size = 0;
};

// Checks `h` and computes the float coefficients; InvalidArgument names the field.
SgdCoeffs sgdCoefficients(const SgdHyper& h);

// One SGD step on elements [offset, offset + count) of `s`.
void sgdStep(const SgdHyper& h, const SgdState& s, std::size_t offset, std::size_t count,
             const StepOptions& options = {});
inline void sgdStep(const SgdHyper& h, const SgdState& s, const StepOptions& options = {}) {
  sgdStep(h, s, 0, s.size, options);
}

}  // namespace zrt::optim
