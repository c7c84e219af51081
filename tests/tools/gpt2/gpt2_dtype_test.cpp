// 16-bit parameter sources (the Engine's bf16 and fp16 training): parameters are widened to
// fp32 and gradients rounded back. Against an fp32 source holding the same (already rounded)
// values, the loss must be the same bits — the arithmetic after widening is identical — and each
// 16-bit gradient must be exactly the fp32 gradient rounded to nearest even.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/device.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

TEST_CASE("gpt2: bf16 and fp16 parameters give the fp32 loss of their values, gradients rounded") {
  const Gpt2Shape shape{.layers = 2, .hidden = 32, .heads = 4, .seqLen = 16, .vocab = 256};
  const int batch = 2;
  const std::size_t n = static_cast<std::size_t>(batch) * shape.seqLen;
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  // One model serves all three sources: the widening scratches appear on the first 16-bit call.
  Gpt2 model(shape, {}, *device, batch);
  const auto in = randomTokens(n, shape.vocab, 41), tg = randomTokens(n, shape.vocab, 42);

  for (DType dt : {DType::BF16, DType::F16}) {
    CAPTURE(nameOf(dt));
    TestSource half(gpt2Model(shape, 5), dt);
    randomise(half, 6, 0.1f);  // rounded to dt as stored
    TestSource full(gpt2Model(shape, 5), DType::F32);
    for (std::size_t m = 0; m < half.numModules(); ++m)
      for (std::size_t i = 0; i < half.numParams(m); ++i) full.set(m, i, half.get(m, i));

    const double seed = 4.0;
    full.beginMicroStep();
    const double fullLoss = model.forwardBackward(full, in.data(), tg.data(), batch, seed);
    half.beginMicroStep();
    const double halfLoss = model.forwardBackward(half, in.data(), tg.data(), batch, seed);
    REQUIRE(half.allReported());
    CHECK(halfLoss == fullLoss);

    std::size_t nonzero = 0;
    for (std::size_t m = 0; m < half.numModules(); ++m) {
      for (std::size_t i = 0; i < half.numParams(m); ++i) {
        CAPTURE(half.name(m, i));
        const std::vector<float> g = full.grad(m, i);
        const std::vector<unsigned char>& bytes = half.gradBytes(m, i);
        REQUIRE(bytes.size() == 2 * g.size());
        std::size_t mismatches = 0;
        for (std::size_t j = 0; j < g.size(); ++j) {
          const std::uint16_t want = dt == DType::BF16 ? floatToBf16(g[j]) : floatToHalf(g[j]);
          std::uint16_t got;
          std::memcpy(&got, bytes.data() + 2 * j, 2);
          mismatches += got != want;
          nonzero += g[j] != 0.0f;
        }
        CHECK(mismatches == 0);
      }
    }
    CHECK(nonzero > 0);
  }
}

TEST_CASE("gpt2: an fp16 overflow in the parameters reaches the loss and the gradients") {
  // The Engine skips an fp16 step when a gradient is inf or NaN; the model must carry a
  // non-finite value through to the loss and the gradients rather than clamp it away.
  const Gpt2Shape shape{.layers = 1, .hidden = 16, .heads = 2, .seqLen = 8, .vocab = 256};
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  Gpt2 model(shape, {}, *device, 1);
  TestSource src(gpt2Model(shape, 1), DType::F16);
  std::vector<float> w = src.get(1, 2);  // h.0.attn.c_attn.weight
  w[5] = std::numeric_limits<float>::infinity();
  src.set(1, 2, w);
  const auto in = randomTokens(8, 256, 1), tg = randomTokens(8, 256, 2);
  src.beginMicroStep();
  const double loss = model.forwardBackward(src, in.data(), tg.data(), 1, 1.0);
  CHECK_FALSE(std::isfinite(loss));
  bool nonFinite = false;
  for (float g : src.grad(0, 0)) nonFinite |= !std::isfinite(g);
  CHECK(nonFinite);
}
