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

TEST_CASE("gpt2: gpt2ActivationBytes is what the model charges to the ledger's activations") {
  // Worked by hand for 1 layer x 16 wide, 2 heads, T 8, batch 1, fp32, no checkpointing: n = 8
  // rows, nc = 128, att = 2·8·8 = 128, every buffer rounded up to 16 floats (n-sized ones to 16).
  // Block: ln1, atty, xmid, ln2 4·128, qkv 384, att 128, fch and fchg 2·512, four n-sized 4·16 =
  // 2112; residual stream x_0, x_1 256; lnf 128, meanf and rstdf 32, logits 8·256 = 2048, rowLoss
  // 16 = 2224; backward: dres, dln, datty, lnTmp 4·128, dqkv 384, dfch 512, datt 128, wte's head
  // gradient 256·16 = 4096, ones 16 = 5648; the inputs' and targets' 8 bytes each and the loss's
  // double, 16 floats each = 48. 10288 floats.
  const Gpt2Shape tiny{.layers = 1, .hidden = 16, .heads = 2, .seqLen = 8, .vocab = 256};
  CHECK(gpt2ActivationBytes(tiny, {}, 1, DType::F32).device == 10288 * 4);
  CHECK(gpt2ActivationBytes(tiny, {}, 1, DType::F32).pinnedHost == 0);

  const Gpt2Shape shape{.layers = 2, .hidden = 32, .heads = 4, .seqLen = 16, .vocab = 256};
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = {LoraTarget::Qkv, LoraTarget::Fc};
  const Gpt2Options options[] = {{}, {true, false, {}}, {true, true, {}}, {false, false, lora}, {true, false, lora}};
  for (const Gpt2Options& o : options) {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (int batch : {1, 3}) {
        CAPTURE(o.activationCheckpointing);
        CAPTURE(o.checkpointOffload);
        CAPTURE(o.lora.rank);
        CAPTURE(nameOf(dt));
        CAPTURE(batch);
        MemoryLedger ledger;
        auto device = makeDevice("host", ledger);
        Gpt2 model(shape, o, *device, batch);
        TestSource src(gpt2Model(shape, 3, o.lora), dt);
        const std::size_t n = static_cast<std::size_t>(batch) * shape.seqLen;
        const auto in = randomTokens(n, shape.vocab, 7), tg = randomTokens(n, shape.vocab, 8);
        src.beginMicroStep();
        model.forwardBackward(src, in.data(), tg.data(), batch, 1.0);
        const Gpt2ActivationBytes want = gpt2ActivationBytes(shape, o, batch, dt);
        CHECK(ledger.get(MemTag::Activations, MemPlace::Device).peak == want.device);
        CHECK(ledger.get(MemTag::Activations, MemPlace::PinnedHost).peak == want.pinnedHost);
        CHECK((want.pinnedHost > 0) == o.checkpointOffload);
      }
    }
  }
}
