// Adam and AdamW on the CPU, with PyTorch's semantics (torch.optim.Adam / AdamW): bias
// correction, eps added outside the square root, L2 weight decay added to the gradient for
// Adam, decoupled weight decay for AdamW. State is fp32 (master parameters, exp_avg,
// exp_avg_sq); gradients arrive as fp32, fp16 or bf16. One fused pass per element applies the
// gradient multiplier (1/loss_scale times the clip coefficient), updates the moments and the
// parameter, and optionally writes the updated parameter to an fp32/fp16/bf16 copy (the
// device's copy).
//
// The step number is explicit: every call for one optimizer step passes the same `step`, so a
// shard updated in several sub-range calls (the NVMe swapper feeds it tile by tile) gets the
// same bias correction as one whole call, bit for bit. Hyperparameters may change every step.
//
// Every path (scalar, AVX2, AVX-512; any thread count; any split into sub-ranges) gives the
// same bits; kernel_args.h states the operation order. Thread-safety: calls on disjoint ranges
// may run concurrently; the arrays of one range must not be touched by anyone else meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "runtime/optim/isa.h"
#include "runtime/optim/kernel_args.h"

namespace zrt::optim {

struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
  bool decoupledWeightDecay = false;  // false: Adam (L2 in the gradient); true: AdamW
  bool biasCorrection = true;         // false: skip the 1 - beta^step factors (DeepSpeed's option)
  std::int64_t step = 1;              // 1-based number of the step being taken
  double gradScale = 1.0;             // multiplier on every gradient; see gradMultiplier()
};

// The combined gradient multiplier: clip coefficient (<= 1, from the global norm) divided by the
// loss scale. Computed in double; the kernels round it to float once per step.
inline double gradMultiplier(double lossScale, double clipCoef = 1.0) {
  return clipCoef / lossScale;
}

// Views of one shard's arrays; nothing is owned. All arrays hold `size` elements indexed from
// the same origin.
struct AdamState {
  float* param = nullptr;
  float* expAvg = nullptr;
  float* expAvgSq = nullptr;
  const void* grad = nullptr;
  DType gradType = DType::F32;
  void* paramCopy = nullptr;  // optional: receives the updated parameter as copyType
  DType copyType = DType::F16;
  std::size_t size = 0;
};

// Checks `h` (lr >= 0, 0 <= beta < 1, eps >= 0, weight decay >= 0, step >= 1, finite gradient
// multiplier) and computes the float coefficients every path uses. Throws InvalidArgument
// naming the field.
AdamCoeffs adamCoefficients(const AdamHyper& h);

// One Adam/AdamW step on elements [offset, offset + count) of `s`. Throws InvalidArgument on a
// bad hyperparameter, a null array, or a range past `s.size` (naming offset, count and size).
void adamStep(const AdamHyper& h, const AdamState& s, std::size_t offset, std::size_t count,
              const StepOptions& options = {});
// The whole shard.
inline void adamStep(const AdamHyper& h, const AdamState& s, const StepOptions& options = {}) {
  adamStep(h, s, 0, s.size, options);
}

// The bandwidth ceiling of adamStep: reads and writes exactly the arrays adamStep would (same
// widths, same in-place pattern, same split among threads) with no arithmetic. The parameter
// copy, if any, receives raw bits, not a conversion. Used by zrt-optim-bench.
void adamRoofline(const AdamState& s, std::size_t offset, std::size_t count,
                  const StepOptions& options = {});

}  // namespace zrt::optim
