// LossScaler: fp16's loss scaling as DeepSpeed's DynamicLossScaler does it. The loss (and so
// every gradient) is multiplied by the scale before backward; a step whose gradients overflow
// (inf or NaN on any rank) is skipped. Each overflow first spends one unit of hysteresis; once
// none is left the scale halves, never below min_loss_scale. After loss_scale_window steps in
// a row without overflow the scale doubles (and, with consecutive_hysteresis, the hysteresis
// refills on every clean step rather than only when the scale grows). A static scale
// (fp16.loss_scale > 0) never changes; bf16 and fp32 train with scale 1.
// Thread-safety: plain value; one thread (the training loop) updates it.
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace zrt {

class LossScaler {
 public:
  // Scale 1, never changes (bf16 and fp32).
  LossScaler() = default;
  // From the config's fp16 section; throws InvalidArgument naming a bad value.
  static LossScaler fromConfig(const Fp16Config& fp16);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  int hysteresisLeft() const { return hysteresisLeft_; }

  // Records the outcome of one step (overflow: the step was skipped) and adjusts the scale.
  void update(bool overflow);

  // The whole state, for checkpoints.
  struct State {
    double scale = 1.0;
    std::int64_t iteration = 0;
    std::int64_t lastOverflowIteration = -1;
    int hysteresisLeft = 1;
  };
  State state() const { return {scale_, iteration_, lastOverflow_, hysteresisLeft_}; }
  void restore(const State& s);

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  double minScale_ = 1.0;
  int window_ = 1000;
  int hysteresis_ = 1;
  bool consecutiveHysteresis_ = false;
  int hysteresisLeft_ = 1;
  std::int64_t iteration_ = 0;
  std::int64_t lastOverflow_ = -1;
};

}  // namespace zrt
