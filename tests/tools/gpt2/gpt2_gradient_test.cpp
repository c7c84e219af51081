// The model's analytic gradients against central differences of its own loss, entry by entry,
// on a tiny GPT-2 (2 layers, hidden 16, 2 heads, T 8, batch 2) with values far from the usual
// initialisation so that every parameter tensor's gradient is well above the difference's noise.
// Independent of the backward code: the differences only run forward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/device.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

TEST_CASE("gpt2: every parameter tensor's gradient matches central differences of the loss") {
  const Gpt2Shape shape{.layers = 2, .hidden = 16, .heads = 2, .seqLen = 8, .vocab = 256};
  const int batch = 2;
  const std::size_t n = static_cast<std::size_t>(batch) * shape.seqLen;
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  Gpt2 model(shape, {}, *device, batch);
  TestSource src(gpt2Model(shape, 1), DType::F32);
  randomise(src, 7, 0.3f);
  const auto inputs = randomTokens(n, shape.vocab, 11);
  const auto targets = randomTokens(n, shape.vocab, 12);

  // A seed other than 1: the gradient must be of (mean loss x seed).
  const double seed = 2.5;
  src.beginMicroStep();
  const double loss = model.forwardBackward(src, inputs.data(), targets.data(), batch, seed);
  REQUIRE(src.allReported());
  src.beginMicroStep();  // every parameters() was released
  CHECK(loss == model.loss(src, inputs.data(), targets.data(), batch));

  // Step h: the weights are O(0.3), so a third-derivative truncation error h^2/6 f''' is ~1e-6
  // of the gradient's scale, while the loss's fp32 rounding noise (a few ulps of ~5.5, ~2e-6 at
  // most) divided by 2h is ~1e-4 absolute on a (seed-scaled) difference. Gradients here are
  // O(1e-2 .. 1), so an entry must agree within 2e-4 + 1% of its tensor's largest gradient: a
  // wrong term (a missing bias, a transposed product, a sign) is off by far more.
  const float h = 1e-2f;
  std::mt19937_64 pick(5);
  for (std::size_t m = 0; m < src.numModules(); ++m) {
    for (std::size_t i = 0; i < src.numParams(m); ++i) {
      const std::vector<float> g = src.grad(m, i);
      std::vector<float> v = src.get(m, i);
      float gmax = 0;
      std::size_t argmax = 0;
      for (std::size_t j = 0; j < g.size(); ++j)
        if (std::abs(g[j]) > gmax) gmax = std::abs(g[j]), argmax = j;
      CAPTURE(src.name(m, i));
      REQUIRE(gmax > 1e-3f);  // else the tensor's check below would prove nothing
      std::vector<std::size_t> entries{argmax};
      for (int e = 0; e < 3; ++e) entries.push_back(pick() % g.size());
      if (m == 0 && i == 0) entries.push_back(inputs[0] * shape.hidden + 3);  // a looked-up row
      for (std::size_t j : entries) {
        const float original = v[j];
        v[j] = original + h;
        src.set(m, i, v);
        const double up = model.loss(src, inputs.data(), targets.data(), batch);
        v[j] = original - h;
        src.set(m, i, v);
        const double down = model.loss(src, inputs.data(), targets.data(), batch);
        v[j] = original;
        src.set(m, i, v);
        // The step actually taken, after rounding to fp32.
        const double step = static_cast<double>(original + h) - static_cast<double>(original - h);
        const double fd = seed * (up - down) / step;
        CAPTURE(j);
        CAPTURE(g[j]);
        CAPTURE(fd);
        CHECK(std::abs(g[j] - fd) <= 2e-4 + 1e-2 * gmax);
      }
    }
  }
}
