#include "runtime/optim/sgd.h"

#include <cmath>

#include "core/error.h"
#include "runtime/optim/detail/kernels.h"
#include "runtime/optim/detail/parallel_range.h"
#include "runtime/optim/detail/step_checks.h"

namespace zrt::optim {

SgdCoeffs sgdCoefficients(const SgdHyper& h) {
  using detail::checkHyper;
  checkHyper("sgd", "lr", h.lr, std::isfinite(h.lr) && h.lr >= 0, "finite and >= 0");
  checkHyper("sgd", "momentum", h.momentum, std::isfinite(h.momentum) && h.momentum >= 0,
             "finite and >= 0");
  checkHyper("sgd", "dampening", h.dampening, std::isfinite(h.dampening), "finite");
  checkHyper("sgd", "weightDecay", h.weightDecay,
             std::isfinite(h.weightDecay) && h.weightDecay >= 0, "finite and >= 0");
  checkHyper("sgd", "gradScale", h.gradScale, std::isfinite(h.gradScale), "finite");
  if (h.nesterov && (h.momentum <= 0 || h.dampening != 0)) {
    ZRT_THROW(InvalidArgument, "sgd: nesterov needs momentum > 0 and dampening == 0, got momentum ",
              h.momentum, " and dampening ", h.dampening);
  }
  if (h.step < 1) {
    ZRT_THROW(InvalidArgument,
              "sgd: step must be >= 1 (the 1-based number of the step being "
              "taken), got ",
              h.step);
  }
  SgdCoeffs c{};
  c.gradScale = static_cast<float>(h.gradScale);
  c.weightDecay = static_cast<float>(h.weightDecay);
  c.momentum = static_cast<float>(h.momentum);
  c.oneMinusDampening = static_cast<float>(1.0 - h.dampening);
  c.negLr = static_cast<float>(-h.lr);
  c.hasWeightDecay = h.weightDecay != 0.0;
  c.momentumMode = h.momentum == 0.0 ? SgdMomentum::None
                   : h.step == 1     ? SgdMomentum::Init
                                     : SgdMomentum::Update;
  c.nesterov = h.nesterov;
  return c;
}

void sgdStep(const SgdHyper& h, const SgdState& s, std::size_t offset, std::size_t count,
             const StepOptions& options) {
  const SgdCoeffs c = sgdCoefficients(h);
  detail::checkRange("sgdStep", offset, count, s.size);
  detail::checkThreads("sgdStep", options.threads);
  if (count == 0) return;
  detail::checkArray("sgdStep", "param", s.param);
  detail::checkArray("sgdStep", "grad", s.grad);
  if (c.momentumMode != SgdMomentum::None) {
    detail::checkArray("sgdStep", "momentumBuffer", s.momentumBuffer);
  }
  const SgdArrays a{s.param,     s.momentumBuffer, s.grad,
                    s.paramCopy, s.gradType,       copyKindOf(s.paramCopy, s.copyType)};
  const detail::SgdKernelFn kernel = detail::kernelsFor(resolveIsa(options.isa)).sgd;
  detail::parallelRange(offset, offset + count, s.param, options.threads,
                        [&](std::size_t b, std::size_t e) { kernel(c, a, b, e); });
}

}  // namespace zrt::optim
