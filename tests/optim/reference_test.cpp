// Against the float64 reference (reference.h) over 100 steps with a learning rate that changes
// every step, for every gradient dtype and every CPU path.
//
// The bounds, with eps32 = 2^-24 (float's unit roundoff) and T = 100 steps:
//   exp_avg_sq, per element:  |v - v*| <= 4 T eps32 |v*|
//     v is a sum of non-negative terms, so its relative error only accumulates: each step adds
//     at most 3 roundings (v*beta2, (1-beta2)*g, the fma) plus the rounding of beta2 and
//     1 - beta2 to float.
//   param and exp_avg, norm-wise: ||x - x*||_inf <= 8 T eps32 ||x*||_inf
//     each step an element goes through at most 8 roundings (gradient multiplier, weight decay,
//     the two of the first moment, the denominator's sqrt, / and +, the update's *, / and +,
//     with coefficient roundings counted in), none amplified: the moments are averages with
//     weights below 1, and the update divides m by sqrt(v) whose relative error is tiny. The
//     bound adds them up linearly over T steps without cancellation, i.e. the worst case.
//     Norm-wise because exp_avg can cancel to near zero in single elements, where a relative
//     error per element says nothing about the arithmetic.
//   The copy in fp16/bf16 must equal the exact conversion of the fp32 parameter.
// SGD uses the same bounds for param and the momentum buffer.
// The observed errors are printed; they are typically ~100x below the bounds.
#include "tests/optim/reference.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/optim/adam.h"
#include "runtime/optim/isa.h"
#include "runtime/optim/sgd.h"
#include "tests/optim/compared_paths.h"
#include "tests/optim/optim_test_util.h"

using namespace zrt;
using namespace zrt::optim;
using namespace zrt::optim::test;

namespace {

constexpr int kSteps = 100;
constexpr std::size_t kN = 4096 + 5;
constexpr double kEps32 = 1.0 / (1 << 24);

double lrAt(int step) {  // linear warm-up for 10 steps, then cosine decay to a tenth
  const double peak = 2e-3;
  if (step <= 10) return peak * step / 10.0;
  const double t = (step - 10) / double(kSteps - 10);
  return peak * (0.1 + 0.9 * 0.5 * (1 + std::cos(3.141592653589793 * t)));
}

double normwise(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(double(x[i]) - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return num / den;
}

double elementwise(const std::vector<float>& x, const std::vector<double>& ref) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = std::abs(double(x[i]) - ref[i]);
    if (e > 0) worst = std::max(worst, ref[i] == 0 ? INFINITY : e / std::abs(ref[i]));
  }
  return worst;
}

// Gradients for step t in `type`, scaled up by `lossScale` as a mixed-precision run would
// produce them (the kernels multiply by 1/lossScale).
GradBuffer gradsAt(DType type, int step, double lossScale) {
  return randomGrads(type, kN, 1000 + step, 0.05 * lossScale);
}

}  // namespace

TEST_CASE("adam and adamw against float64 over 100 steps: every gradient dtype, every path") {
  struct Cfg {
    const char* name;
    double wd;
    bool decoupled;
    double eps;
  };
  const Cfg cfgs[] = {
      {"adam", 0.0, false, 1e-8}, {"adam+L2", 0.01, false, 1e-8}, {"adamw", 0.1, true, 1e-6}};
  for (const Cfg& cfg : cfgs) {
    for (DType gt : {DType::F32, DType::F16, DType::BF16}) {
      const double lossScale = gt == DType::F16 ? 1024.0 : 1.0;
      for (Isa isa : pathsToCompare()) {
        std::vector<float> p = randomFloats(kN, 11, 0.0f, 0.5f);
        std::vector<float> m(kN, 0.0f), v(kN, 0.0f);
        std::vector<std::uint16_t> copy(kN);
        AdamRef ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(kN, 0.0),
                    std::vector<double>(kN, 0.0)};
        for (int step = 1; step <= kSteps; ++step) {
          AdamHyper h;
          h.lr = lrAt(step);
          h.beta1 = 0.9;
          h.beta2 = 0.999;
          h.eps = cfg.eps;
          h.weightDecay = cfg.wd;
          h.decoupledWeightDecay = cfg.decoupled;
          h.step = step;
          h.gradScale = gradMultiplier(lossScale, step % 3 == 0 ? 0.5 : 1.0);
          const GradBuffer g = gradsAt(gt, step, lossScale);
          AdamState s{p.data(),
                      m.data(),
                      v.data(),
                      g.data(),
                      gt,
                      copy.data(),
                      gt == DType::BF16 ? DType::BF16 : DType::F16,
                      kN};
          adamStep(h, s, {isa, 2});
          ref.step(h, [&](std::size_t i) { return g.value(i); });
        }
        const double ep = normwise(p, ref.p), em = normwise(m, ref.m), ev = elementwise(v, ref.v);
        MESSAGE(std::string(cfg.name)
                << " grad " << nameOf(gt) << " path " << nameOf(isa) << ": param " << ep
                << " exp_avg " << em << " exp_avg_sq " << ev);
        CHECK(ep <= 8 * kSteps * kEps32);
        CHECK(em <= 8 * kSteps * kEps32);
        CHECK(ev <= 4 * kSteps * kEps32);
        // The reference moved far from the start: the bounds are not met by doing nothing.
        CHECK(normwise(randomFloats(kN, 11, 0.0f, 0.5f), ref.p) > 100 * 8 * kSteps * kEps32);
        for (std::size_t i = 0; i < kN; ++i) {
          const std::uint16_t want = gt == DType::BF16 ? floatToBf16(p[i]) : floatToHalf(p[i]);
          if (copy[i] != want) {
            FAIL("copy differs from the converted parameter at element " << i);
            break;
          }
        }
      }
    }
  }
}

TEST_CASE("sgd against float64 over 100 steps: every gradient dtype, every path") {
  struct Cfg {
    const char* name;
    double momentum, dampening, wd;
    bool nesterov;
  };
  const Cfg cfgs[] = {{"sgd", 0, 0, 0, false},
                      {"sgd+momentum+dampening+wd", 0.9, 0.1, 1e-3, false},
                      {"sgd+nesterov", 0.9, 0, 1e-3, true}};
  for (const Cfg& cfg : cfgs) {
    for (DType gt : {DType::F32, DType::F16, DType::BF16}) {
      for (Isa isa : pathsToCompare()) {
        std::vector<float> p = randomFloats(kN, 12, 0.0f, 0.5f);
        std::vector<float> buf(kN, 0.0f);
        SgdRef ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(kN, 0.0)};
        for (int step = 1; step <= kSteps; ++step) {
          SgdHyper h;
          h.lr = 10 * lrAt(step);
          h.momentum = cfg.momentum;
          h.dampening = cfg.dampening;
          h.weightDecay = cfg.wd;
          h.nesterov = cfg.nesterov;
          h.step = step;
          h.gradScale = step % 4 == 0 ? 0.25 : 1.0;
          const GradBuffer g = gradsAt(gt, step, 1.0);
          SgdState s{p.data(), buf.data(), g.data(), gt, nullptr, DType::F16, kN};
          sgdStep(h, s, {isa, 2});
          ref.step(h, [&](std::size_t i) { return g.value(i); });
        }
        const double ep = normwise(p, ref.p);
        MESSAGE(std::string(cfg.name)
                << " grad " << nameOf(gt) << " path " << nameOf(isa) << ": param " << ep);
        CHECK(ep <= 8 * kSteps * kEps32);
        if (cfg.momentum != 0) {
          const double eb = normwise(buf, ref.buf);
          MESSAGE("  momentum buffer " << eb);
          CHECK(eb <= 8 * kSteps * kEps32);
        }
        CHECK(normwise(randomFloats(kN, 12, 0.0f, 0.5f), ref.p) > 100 * 8 * kSteps * kEps32);
      }
    }
  }
}
