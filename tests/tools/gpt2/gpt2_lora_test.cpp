// LoRA in the reference trainer's GPT-2 (tools/trainer/model/lora.h), on a tiny model over a
// plain fp32 source:
//   - the registration: the base is the model without LoRA value for value, all frozen; the
//     adapters have PEFT's names and shapes (lora_A [r, in], lora_B [out, r]), A its
//     kaiming-uniform bound, B zero;
//   - fresh adapters (B = 0) leave the loss and the logits bit for bit;
//   - the adapters folded into the base weights (W + alpha/r (B A)^T, W stored [in, out]),
//     computed here in double, give the logits of base + adapters within fp32 rounding;
//   - activation checkpointing recomputes the adapters' path bit for bit.
// The gradients are checked against central differences in gpt2_gradient_test and against
// PyTorch in gpt2_torch_test.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "core/device.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

namespace {

const Gpt2Shape kShape{.layers = 2, .hidden = 16, .heads = 2, .seqLen = 8, .vocab = 256};
constexpr int kBatch = 2;
const LoraConfig kLora{4, 8.0, {LoraTarget::Qkv, LoraTarget::Proj, LoraTarget::Fc, LoraTarget::MlpProj}};

// Every parameter of `from` into the parameter of the same name in `to` (which may have more).
void copyByName(const TestSource& from, TestSource& to) {
  std::map<std::string, std::vector<float>> values;
  for (std::size_t m = 0; m < from.numModules(); ++m)
    for (std::size_t i = 0; i < from.numParams(m); ++i) values[from.name(m, i)] = from.get(m, i);
  for (std::size_t m = 0; m < to.numModules(); ++m)
    for (std::size_t i = 0; i < to.numParams(m); ++i) {
      const auto it = values.find(to.name(m, i));
      if (it != values.end()) to.set(m, i, it->second);
    }
}

// Index of the parameter named `name` in module m.
std::size_t indexOf(const TestSource& s, std::size_t m, const std::string& name) {
  for (std::size_t i = 0; i < s.numParams(m); ++i)
    if (s.name(m, i) == name) return i;
  FAIL("no parameter " << name);
  return 0;
}

double maxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(double{x}));
  return m;
}

}  // namespace

TEST_CASE("LoRA registration: the base unchanged and frozen, adapters named and shaped as PEFT's") {
  const EngineModel base = gpt2Model(kShape, 9), lora = gpt2Model(kShape, 9, kLora);
  REQUIRE(base.modules.size() == lora.modules.size());
  const std::int64_t C = kShape.hidden, r = kLora.rank;
  for (std::size_t m = 0; m < base.modules.size(); ++m) {
    const auto& b = base.modules[m].params;
    const auto& l = lora.modules[m].params;
    const bool block = m >= 1 && m <= static_cast<std::size_t>(kShape.layers);
    REQUIRE(l.size() == b.size() + (block ? 8 : 0));
    for (std::size_t i = 0; i < b.size(); ++i) {
      CAPTURE(b[i].name);
      CHECK(l[i].name == b[i].name);
      CHECK(l[i].shape == b[i].shape);
      CHECK(b[i].trainable);
      CHECK_FALSE(l[i].trainable);
      std::vector<float> vb(numelOf(b[i])), vl(vb.size());
      b[i].init(vb.data(), vb.size());
      l[i].init(vl.data(), vl.size());
      CHECK(vb == vl);
    }
    if (!block) continue;
    const std::string p = "h." + std::to_string(m - 1) + ".";
    const std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> layers{
        {"attn.c_attn", C, 3 * C}, {"attn.c_proj", C, C}, {"mlp.c_fc", C, 4 * C}, {"mlp.c_proj", 4 * C, C}};
    for (std::size_t k = 0; k < layers.size(); ++k) {
      const auto& [layer, in, out] = layers[k];
      const ParamSpec& a = l[b.size() + 2 * k];
      const ParamSpec& bb = l[b.size() + 2 * k + 1];
      CHECK(a.name == p + layer + ".lora_A.weight");
      CHECK(bb.name == p + layer + ".lora_B.weight");
      CHECK(a.shape == std::vector<std::int64_t>{r, in});
      CHECK(bb.shape == std::vector<std::int64_t>{out, r});
      CHECK(a.trainable);
      CHECK(bb.trainable);
      std::vector<float> va(numelOf(a)), vb(numelOf(bb), 1.0f);
      a.init(va.data(), va.size());
      bb.init(vb.data(), vb.size());
      // PEFT's kaiming_uniform_(a = sqrt(5)) bound, 1/sqrt(in), and spread over most of it.
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      CHECK(maxAbs(va) <= bound);
      CHECK(maxAbs(va) > 0.8 * bound);
      CHECK(maxAbs(vb) == 0.0);
    }
  }
  // Another subset of targets draws the same values for the adapters both have.
  const EngineModel qkvOnly = gpt2Model(kShape, 9, {4, 8.0, {LoraTarget::Qkv}});
  std::vector<float> x(static_cast<std::size_t>(r * C)), y(x.size());
  qkvOnly.modules[2].params[12].init(x.data(), x.size());
  lora.modules[2].params[12].init(y.data(), y.size());
  CHECK(qkvOnly.modules[2].params[12].name == "h.1.attn.c_attn.lora_A.weight");
  CHECK(x == y);
}

TEST_CASE("fresh adapters (B = 0) give the base model's loss and logits bit for bit") {
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  const std::size_t n = static_cast<std::size_t>(kBatch) * kShape.seqLen;
  const auto inputs = randomTokens(n, kShape.vocab, 41), targets = randomTokens(n, kShape.vocab, 42);
  TestSource base(gpt2Model(kShape, 3), DType::F32);
  randomise(base, 17, 0.3f);
  TestSource lora(gpt2Model(kShape, 3, kLora), DType::F32);
  copyByName(base, lora);  // the base's values; A as initialised, B zero

  for (const bool ckpt : {false, true}) {
    CAPTURE(ckpt);
    Gpt2 plain(kShape, {.activationCheckpointing = ckpt}, *device, kBatch);
    Gpt2 adapted(kShape, {.activationCheckpointing = ckpt, .lora = kLora}, *device, kBatch);
    base.beginMicroStep();
    lora.beginMicroStep();
    const std::vector<float> want = plain.logits(base, inputs.data(), kBatch);
    const std::vector<float> got = adapted.logits(lora, inputs.data(), kBatch);
    CHECK(got == want);
    base.beginMicroStep();
    lora.beginMicroStep();
    CHECK(adapted.loss(lora, inputs.data(), targets.data(), kBatch) ==
          plain.loss(base, inputs.data(), targets.data(), kBatch));
    base.beginMicroStep();
    lora.beginMicroStep();
    CHECK(adapted.forwardBackward(lora, inputs.data(), targets.data(), kBatch, 1.0) ==
          plain.forwardBackward(base, inputs.data(), targets.data(), kBatch, 1.0));
    // With B = 0, A receives no gradient (it reaches A only through B) while B does.
    for (int b = 0; b < kShape.layers; ++b) {
      const std::size_t m = static_cast<std::size_t>(b) + 1;
      const std::string p = "h." + std::to_string(b) + ".mlp.c_fc.";
      CHECK(maxAbs(lora.grad(m, indexOf(lora, m, p + "lora_A.weight"))) == 0.0);
      CHECK(maxAbs(lora.grad(m, indexOf(lora, m, p + "lora_B.weight"))) > 1e-4);
    }
  }
}

TEST_CASE("adapters folded into the base weights give the logits of base + adapters") {
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  const std::size_t n = static_cast<std::size_t>(kBatch) * kShape.seqLen;
  const auto inputs = randomTokens(n, kShape.vocab, 51);
  TestSource lora(gpt2Model(kShape, 4, kLora), DType::F32);
  randomise(lora, 23, 0.2f);  // B far from zero, so the adapters move the outputs
  TestSource merged(gpt2Model(kShape, 4), DType::F32);
  copyByName(lora, merged);
  const double s = kLora.scaling();
  const int r = kLora.rank;
  for (int b = 0; b < kShape.layers; ++b) {
    const std::size_t m = static_cast<std::size_t>(b) + 1;
    for (LoraTarget t : kLora.targets) {
      const std::string layer = "h." + std::to_string(b) + "." + std::string(layerPath(t));
      const std::int64_t in = inFeatures(t, kShape.hidden), out = outFeatures(t, kShape.hidden);
      const std::size_t wi = indexOf(merged, m, layer + ".weight");
      std::vector<float> w = merged.get(m, wi);
      const std::vector<float> A = lora.get(m, indexOf(lora, m, layer + ".lora_A.weight"));
      const std::vector<float> B = lora.get(m, indexOf(lora, m, layer + ".lora_B.weight"));
      // W [in, out] (Conv1D): W[i][o] += s sum_k B[o][k] A[k][i], in double, rounded once.
      for (std::int64_t i = 0; i < in; ++i)
        for (std::int64_t o = 0; o < out; ++o) {
          double d = 0;
          for (int k = 0; k < r; ++k) d += double{B[static_cast<std::size_t>(o * r + k)]} * A[static_cast<std::size_t>(k * in + i)];
          float& x = w[static_cast<std::size_t>(i * out + o)];
          x = static_cast<float>(x + s * d);
        }
      merged.set(m, wi, w);
    }
  }
  TestSource unmerged(gpt2Model(kShape, 4), DType::F32);
  copyByName(lora, unmerged);  // the base alone: how far the adapters move the logits

  Gpt2 plain(kShape, {}, *device, kBatch);
  Gpt2 adapted(kShape, {.lora = kLora}, *device, kBatch);
  lora.beginMicroStep();
  const std::vector<float> want = adapted.logits(lora, inputs.data(), kBatch);
  const std::vector<float> got = plain.logits(merged, inputs.data(), kBatch);
  const std::vector<float> baseOnly = plain.logits(unmerged, inputs.data(), kBatch);
  const double scale = maxAbs(want);
  double worst = 0, moved = 0;
  for (std::size_t j = 0; j < want.size(); ++j) {
    worst = std::max(worst, std::abs(double{got[j]} - want[j]));
    moved = std::max(moved, std::abs(double{baseOnly[j]} - want[j]));
  }
  CAPTURE(scale);
  CAPTURE(worst);
  CAPTURE(moved);
  // Both sides are fp32 arithmetic on the same values, grouped differently: the merged weight
  // is rounded once (6e-8 relative) where base + adapters rounds x W, u = x A^T and u B^T apart.
  // Through two blocks and the head (sums of at most 4C = 64 products, ~10 stages) that is
  // ~1e-6 of the logits' scale; 1e-5 leaves room, while the adapters themselves move the
  // logits by a sizeable fraction of it (a wrong transpose or scaling would be that far off).
  CHECK(moved > 0.05 * scale);
  CHECK(worst <= 1e-5 * scale);
}

TEST_CASE("activation checkpointing with LoRA: the adapters' gradients bit for bit") {
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  const std::size_t n = static_cast<std::size_t>(kBatch) * kShape.seqLen;
  const auto inputs = randomTokens(n, kShape.vocab, 61), targets = randomTokens(n, kShape.vocab, 62);
  TestSource ref(gpt2Model(kShape, 5, kLora), DType::F32);
  randomise(ref, 29, 0.2f);
  Gpt2 straight(kShape, {.lora = kLora}, *device, kBatch);
  ref.beginMicroStep();
  const double want = straight.forwardBackward(ref, inputs.data(), targets.data(), kBatch, 1.5);
  for (const bool offload : {false, true}) {
    CAPTURE(offload);
    TestSource src(gpt2Model(kShape, 5, kLora), DType::F32);
    copyByName(ref, src);
    Gpt2 ckpt(kShape, {.activationCheckpointing = true, .checkpointOffload = offload, .lora = kLora}, *device, kBatch);
    src.beginMicroStep();
    CHECK(ckpt.forwardBackward(src, inputs.data(), targets.data(), kBatch, 1.5) == want);
    for (std::size_t m = 0; m < src.numModules(); ++m)
      for (std::size_t i = 0; i < src.numParams(m); ++i) {
        if (!src.trainable(m, i)) continue;
        CAPTURE(src.name(m, i));
        CHECK(src.gradBytes(m, i) == ref.gradBytes(m, i));
      }
  }
}
