// The float64 reference: Adam/AdamW and SGD written from their definitions (PyTorch's docs) in
// double, with no shared code with the kernels. The tests run the float kernels and this side
// by side and bound the difference (reference_test.cpp states the bounds).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "runtime/optim/adam.h"
#include "runtime/optim/sgd.h"

namespace zrt::optim::test {

struct AdamRef {
  std::vector<double> p, m, v;

  // g[i]: the exact gradient values the kernels saw.
  template <class GradAt>
  void step(const AdamHyper& h, GradAt g) {
    const double t = static_cast<double>(h.step);
    const double bc1 = h.biasCorrection ? 1.0 - std::pow(h.beta1, t) : 1.0;
    const double bc2 = h.biasCorrection ? 1.0 - std::pow(h.beta2, t) : 1.0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      double gi = g(i) * h.gradScale;
      if (h.weightDecay != 0 && !h.decoupledWeightDecay) gi += h.weightDecay * p[i];
      if (h.decoupledWeightDecay) p[i] *= 1.0 - h.lr * h.weightDecay;
      m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * gi;
      v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * gi * gi;
      const double mHat = m[i] / bc1;
      const double vHat = v[i] / bc2;
      p[i] -= h.lr * mHat / (std::sqrt(vHat) + h.eps);
    }
  }
};

struct SgdRef {
  std::vector<double> p, buf;

  template <class GradAt>
  void step(const SgdHyper& h, GradAt g) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g(i) * h.gradScale;
      if (h.weightDecay != 0) d += h.weightDecay * p[i];
      if (h.momentum != 0) {
        buf[i] = h.step == 1 ? d : h.momentum * buf[i] + (1.0 - h.dampening) * d;
        d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
      }
      p[i] -= h.lr * d;
    }
  }
};

}  // namespace zrt::optim::test
