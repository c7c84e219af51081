// The model's analytic gradients against central differences of its own loss, entry by entry,
// on a tiny GPT-2 (2 layers, hidden 16, 2 heads, T 8, batch 2) with values far from the usual
// initialisation so that every parameter tensor's gradient is well above the difference's noise.
// Independent of the backward code: the differences only run forward. Then the same for LoRA's
// lora_A and lora_B on every target layer, the base frozen.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/device.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

namespace {

const Gpt2Shape kShape{.layers = 2, .hidden = 16, .heads = 2, .seqLen = 8, .vocab = 256};
constexpr int kBatch = 2;

// Every trainable tensor's gradient of (mean loss x seed) against central differences at its
// largest entry and three random ones (and, for wte, a looked-up row). Returns how many tensors
// were checked.
int checkAgainstDifferences(Gpt2& model, TestSource& src, double seed) {
  const std::size_t n = static_cast<std::size_t>(kBatch) * kShape.seqLen;
  const auto inputs = randomTokens(n, kShape.vocab, 11);
  const auto targets = randomTokens(n, kShape.vocab, 12);

  src.beginMicroStep();
  const double loss = model.forwardBackward(src, inputs.data(), targets.data(), kBatch, seed);
  REQUIRE(src.allReported());
  src.beginMicroStep();  // every parameters() was released
  CHECK(loss == model.loss(src, inputs.data(), targets.data(), kBatch));

  // Step h: the weights are O(0.3), so a third-derivative truncation error h^2/6 f''' is ~1e-6
  // of the gradient's scale, while the loss's fp32 rounding noise (a few ulps of ~5.5, ~2e-6 at
  // most) divided by 2h is ~1e-4 absolute on a (seed-scaled) difference. Gradients here are
  // O(1e-2 .. 1), so an entry must agree within 2e-4 + 1% of its tensor's largest gradient: a
  // wrong term (a missing bias, a transposed product, a sign) is off by far more.
  const float h = 1e-2f;
  std::mt19937_64 pick(5);
  int checked = 0;
  for (std::size_t m = 0; m < src.numModules(); ++m) {
    for (std::size_t i = 0; i < src.numParams(m); ++i) {
      CAPTURE(src.name(m, i));
      if (!src.trainable(m, i)) {
        // A frozen tensor's gradient is never asked for: the source's garbage stays.
        const auto& bytes = src.gradBytes(m, i);
        CHECK(std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0xAB; }));
        continue;
      }
      ++checked;
      const std::vector<float> g = src.grad(m, i);
      std::vector<float> v = src.get(m, i);
      float gmax = 0;
      std::size_t argmax = 0;
      for (std::size_t j = 0; j < g.size(); ++j)
        if (std::abs(g[j]) > gmax) gmax = std::abs(g[j]), argmax = j;
      REQUIRE(gmax > 1e-3f);  // else the tensor's check below would prove nothing
      std::vector<std::size_t> entries{argmax};
      for (int e = 0; e < 3; ++e) entries.push_back(pick() % g.size());
      if (m == 0 && i == 0) entries.push_back(inputs[0] * kShape.hidden + 3);  // a looked-up row
      for (std::size_t j : entries) {
        const float original = v[j];
        v[j] = original + h;
        src.set(m, i, v);
        const double up = model.loss(src, inputs.data(), targets.data(), kBatch);
        v[j] = original - h;
        src.set(m, i, v);
        const double down = model.loss(src, inputs.data(), targets.data(), kBatch);
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
  return checked;
}

}  // namespace

TEST_CASE("gpt2: every parameter tensor's gradient matches central differences of the loss") {
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  Gpt2 model(kShape, {}, *device, kBatch);
  TestSource src(gpt2Model(kShape, 1), DType::F32);
  randomise(src, 7, 0.3f);
  // A seed other than 1: the gradient must be of (mean loss x seed).
  CHECK(checkAgainstDifferences(model, src, 2.5) == 2 + 12 * kShape.layers + 2);
}

TEST_CASE("gpt2 with LoRA: lora_A's and lora_B's gradients on every target match central differences") {
  // Rank 3 (odd) and scaling alpha / r = 2, on all four layers of each block. The adapters are
  // randomised with the rest: with B = 0 (their start) A's gradient would be zero, proving nothing.
  const LoraConfig lora{3, 6.0, {LoraTarget::Qkv, LoraTarget::Proj, LoraTarget::Fc, LoraTarget::MlpProj}};
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  Gpt2 model(kShape, {.lora = lora}, *device, kBatch);
  TestSource src(gpt2Model(kShape, 1, lora), DType::F32);
  randomise(src, 7, 0.3f);
  CHECK(checkAgainstDifferences(model, src, 2.5) == 2 * 4 * kShape.layers);
}
