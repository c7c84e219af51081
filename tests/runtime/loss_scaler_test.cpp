// The loss scaler alone against DeepSpeed's DynamicLossScaler rules, step by step: hysteresis
// spent before the scale halves, the floor at min_loss_scale, doubling after loss_scale_window
// clean steps, consecutive_hysteresis refilling on every clean step, and a static scale.
#include <doctest/doctest.h>

#include "core/error.h"
#include "runtime/loss_scaler.h"

using namespace zrt;

TEST_CASE("dynamic loss scaling: hysteresis, halving to the floor, doubling after the window") {
  Fp16Config c;
  c.enabled = true;
  c.initial_scale_power = 4;  // 16
  c.hysteresis = 2;
  c.loss_scale_window = 2;
  c.min_loss_scale = 4;
  LossScaler s = LossScaler::fromConfig(c);
  CHECK(s.scale() == 16);
  // step: overflow?, scale after
  const struct {
    bool overflow;
    double scale;
    int hysteresisLeft;
  } seq[] = {
      {true, 16, 1},   // hysteresis spent first
      {true, 8, 1},    // then halved
      {true, 4, 1},    // halved to the floor
      {true, 4, 1},    // never below it
      {false, 4, 1},   // one clean step: not yet
      {false, 8, 2},   // window (2) of clean steps: doubled, hysteresis refilled
      {false, 8, 2},
      {false, 16, 2},  // and again after the next window
      {true, 16, 1},
  };
  for (const auto& st : seq) {
    s.update(st.overflow);
    CHECK(s.scale() == st.scale);
    CHECK(s.hysteresisLeft() == st.hysteresisLeft);
  }
}

TEST_CASE("consecutive_hysteresis refills on every clean step") {
  Fp16Config c;
  c.enabled = true;
  c.initial_scale_power = 4;
  c.hysteresis = 3;
  c.loss_scale_window = 100;
  c.consecutive_hysteresis = true;
  LossScaler s = LossScaler::fromConfig(c);
  s.update(true);
  s.update(true);
  CHECK(s.hysteresisLeft() == 1);
  s.update(false);
  CHECK(s.hysteresisLeft() == 3);
  CHECK(s.scale() == 16);
}

TEST_CASE("static, bf16/fp32 and bad settings") {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 128;
  LossScaler fixed = LossScaler::fromConfig(c);
  fixed.update(true);
  CHECK(fixed.scale() == 128);
  CHECK_FALSE(fixed.dynamic());
  CHECK(LossScaler::fromConfig(Fp16Config{}).scale() == 1);
  Fp16Config bad;
  bad.enabled = true;
  bad.hysteresis = 0;
  CHECK_THROWS_WITH_AS(LossScaler::fromConfig(bad), doctest::Contains("fp16.hysteresis"), InvalidArgument);
}
