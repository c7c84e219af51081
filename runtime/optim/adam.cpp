#include "runtime/optim/adam.h"

#include <cmath>

#include "core/error.h"
#include "runtime/optim/detail/kernels.h"
#include "runtime/optim/detail/parallel_range.h"
#include "runtime/optim/detail/step_checks.h"

namespace zrt::optim {

AdamCoeffs adamCoefficients(const AdamHyper& h) {
  using detail::checkHyper;
  checkHyper("adam", "lr", h.lr, std::isfinite(h.lr) && h.lr >= 0, "finite and >= 0");
  checkHyper("adam", "beta1", h.beta1, h.beta1 >= 0 && h.beta1 < 1, "in [0, 1)");
  checkHyper("adam", "beta2", h.beta2, h.beta2 >= 0 && h.beta2 < 1, "in [0, 1)");
  checkHyper("adam", "eps", h.eps, std::isfinite(h.eps) && h.eps >= 0, "finite and >= 0");
  checkHyper("adam", "weightDecay", h.weightDecay,
             std::isfinite(h.weightDecay) && h.weightDecay >= 0, "finite and >= 0");
  checkHyper("adam", "gradScale", h.gradScale, std::isfinite(h.gradScale), "finite");
  if (h.step < 1) {
    ZRT_THROW(InvalidArgument,
              "adam: step must be >= 1 (the 1-based number of the step being "
              "taken), got ",
              h.step);
  }
  // Host arithmetic in double, rounded to float once, as PyTorch computes its Python-side
  // scalars in double and hands them to float kernels.
  const double steps = static_cast<double>(h.step);
  const double bc1 = h.biasCorrection ? 1.0 - std::pow(h.beta1, steps) : 1.0;
  const double bc2 = h.biasCorrection ? 1.0 - std::pow(h.beta2, steps) : 1.0;
  AdamCoeffs c{};
  c.gradScale = static_cast<float>(h.gradScale);
  c.weightDecay = static_cast<float>(h.weightDecay);
  c.decay = static_cast<float>(1.0 - h.lr * h.weightDecay);
  c.beta1 = static_cast<float>(h.beta1);
  c.oneMinusBeta1 = static_cast<float>(1.0 - h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.oneMinusBeta2 = static_cast<float>(1.0 - h.beta2);
  c.biasCorrection2Sqrt = static_cast<float>(std::sqrt(bc2));
  c.eps = static_cast<float>(h.eps);
  c.negStepSize = static_cast<float>(-(h.lr / bc1));
  // With no weight decay, AdamW's p * (1 - lr * 0) is p * 1: the Plain kernel is the same bits.
  c.mode = h.weightDecay == 0.0     ? AdamMode::Plain
           : h.decoupledWeightDecay ? AdamMode::Decoupled
                                    : AdamMode::L2;
  return c;
}

namespace {

AdamArrays arraysOf(const AdamState& s, std::size_t offset, std::size_t count, const char* what) {
  detail::checkRange(what, offset, count, s.size);
  if (count > 0) {
    detail::checkArray(what, "param", s.param);
    detail::checkArray(what, "expAvg", s.expAvg);
    detail::checkArray(what, "expAvgSq", s.expAvgSq);
    detail::checkArray(what, "grad", s.grad);
  }
  return AdamArrays{s.param,
                    s.expAvg,
                    s.expAvgSq,
                    s.grad,
                    s.paramCopy,
                    s.gradType,
                    copyKindOf(s.paramCopy, s.copyType)};
}

}  // namespace

void adamStep(const AdamHyper& h, const AdamState& s, std::size_t offset, std::size_t count,
              const StepOptions& options) {
  const AdamCoeffs c = adamCoefficients(h);
  const AdamArrays a = arraysOf(s, offset, count, "adamStep");
  detail::checkThreads("adamStep", options.threads);
  if (count == 0) return;
  const detail::AdamKernelFn kernel = detail::kernelsFor(resolveIsa(options.isa)).adam;
  detail::parallelRange(offset, offset + count, s.param, options.threads,
                        [&](std::size_t b, std::size_t e) { kernel(c, a, b, e); });
}

void adamRoofline(const AdamState& s, std::size_t offset, std::size_t count,
                  const StepOptions& options) {
  const AdamArrays a = arraysOf(s, offset, count, "adamRoofline");
  detail::checkThreads("adamRoofline", options.threads);
  if (count == 0) return;
  const detail::RooflineKernelFn kernel = detail::kernelsFor(resolveIsa(options.isa)).roofline;
  detail::parallelRange(offset, offset + count, s.param, options.threads,
                        [&](std::size_t b, std::size_t e) { kernel(a, b, e); });
}

}  // namespace zrt::optim
