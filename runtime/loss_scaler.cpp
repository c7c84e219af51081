#include "runtime/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zrt {

LossScaler LossScaler::fromConfig(const Fp16Config& fp16) {
  LossScaler s;
  if (!fp16.enabled) return s;
  if (fp16.loss_scale > 0) {
    if (!std::isfinite(fp16.loss_scale))
      ZRT_THROW(InvalidArgument, "fp16.loss_scale must be finite, got ", fp16.loss_scale);
    s.scale_ = fp16.loss_scale;
    return s;
  }
  if (fp16.initial_scale_power < 0 || fp16.initial_scale_power > 126)
    ZRT_THROW(InvalidArgument, "fp16.initial_scale_power must be in 0..126, got ",
              fp16.initial_scale_power);
  if (fp16.loss_scale_window < 1)
    ZRT_THROW(InvalidArgument, "fp16.loss_scale_window must be at least 1, got ",
              fp16.loss_scale_window);
  if (fp16.hysteresis < 1)
    ZRT_THROW(InvalidArgument, "fp16.hysteresis must be at least 1, got ", fp16.hysteresis);
  if (!(fp16.min_loss_scale > 0))
    ZRT_THROW(InvalidArgument, "fp16.min_loss_scale must be positive, got ", fp16.min_loss_scale);
  s.dynamic_ = true;
  s.scale_ = std::ldexp(1.0, fp16.initial_scale_power);
  s.minScale_ = fp16.min_loss_scale;
  s.window_ = fp16.loss_scale_window;
  s.hysteresis_ = fp16.hysteresis;
  s.consecutiveHysteresis_ = fp16.consecutive_hysteresis;
  s.hysteresisLeft_ = fp16.hysteresis;
  return s;
}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    // DeepSpeed's delayed shift: an overflow is forgiven while hysteresis remains.
    if (hysteresisLeft_ <= 1)
      scale_ = std::max(scale_ / 2, minScale_);
    else
      --hysteresisLeft_;
    lastOverflow_ = iteration_;
  } else {
    if (consecutiveHysteresis_) hysteresisLeft_ = hysteresis_;
    if ((iteration_ - lastOverflow_) % window_ == 0) {
      if (!consecutiveHysteresis_) hysteresisLeft_ = hysteresis_;
      scale_ *= 2;
    }
  }
  ++iteration_;
}

void LossScaler::restore(const State& s) {
  scale_ = s.scale;
  iteration_ = s.iteration;
  lastOverflow_ = s.lastOverflowIteration;
  hysteresisLeft_ = s.hysteresisLeft;
}

}  // namespace zrt
