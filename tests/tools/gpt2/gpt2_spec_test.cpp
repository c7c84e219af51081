// GPT-2's registration (names, shapes, GPT-2's initialisation, seeding) and its errors: shapes
// that cannot be built and misuse (batch, tokens, a source with the wrong tensors), each
// rejected with a message naming the offending field.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

namespace {

// The call throws InvalidArgument and its message contains every one of `words`.
void checkRejected(const std::function<void()>& call, std::initializer_list<std::string> words) {
  try {
    call();
    FAIL("no exception; expected one naming " << *words.begin());
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    for (const auto& w : words) {
      CAPTURE(what);
      CHECK(what.find(w) != std::string::npos);
    }
  }
}

double stddevOf(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += double{x} * x;
  const double mean = s / v.size();
  return std::sqrt(s2 / v.size() - mean * mean);
}

}  // namespace

TEST_CASE("gpt2: validate names the field of a shape that cannot be built") {
  Gpt2Shape s;
  CHECK_NOTHROW(validate(s));
  auto with = [](auto change) {
    Gpt2Shape s;
    change(s);
    return s;
  };
  checkRejected([&] { validate(with([](Gpt2Shape& s) { s.layers = 0; })); }, {"layers", "0"});
  checkRejected([&] { validate(with([](Gpt2Shape& s) { s.hidden = -4; })); }, {"hidden", "-4"});
  checkRejected([&] { validate(with([](Gpt2Shape& s) { s.heads = 0; })); }, {"heads"});
  checkRejected([&] { validate(with([](Gpt2Shape& s) { s.hidden = 30; })); },
                {"hidden (30)", "heads (4)"});
  checkRejected([&] { validate(with([](Gpt2Shape& s) { s.seqLen = 0; })); }, {"seqLen"});
  checkRejected([&] { validate(with([](Gpt2Shape& s) { s.seqLen = -1; })); }, {"seqLen", "-1"});
  checkRejected([&] { validate(with([](Gpt2Shape& s) { s.vocab = 300; })); }, {"vocab", "300"});
  checkRejected([&] { gpt2Model(with([](Gpt2Shape& s) { s.heads = 3; }), 0); }, {"heads"});
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  checkRejected([&] { Gpt2 m(with([](Gpt2Shape& s) { s.seqLen = 0; }), {}, *device, 1); },
                {"seqLen"});
  checkRejected([&] { Gpt2 m(s, {}, *device, 0); }, {"maxBatch"});
  checkRejected([&] { Gpt2 m(s, {.checkpointOffload = true}, *device, 1); },
                {"checkpointOffload", "activationCheckpointing"});
  CHECK(ledger.get(MemTag::Activations, MemPlace::Device).current == 0);  // nothing leaked
}

TEST_CASE("gpt2: the registration is HF GPT-2's, initialised as GPT-2 is") {
  const Gpt2Shape shape{.layers = 3, .hidden = 64, .heads = 4, .seqLen = 32, .vocab = 256};
  const EngineModel model = gpt2Model(shape, 77);
  REQUIRE(model.modules.size() == 5);
  CHECK(model.modules[0].name == "embed");
  CHECK(model.modules[2].name == "h.1");
  CHECK(model.modules[4].name == "ln_f");
  const std::vector<std::string> blockNames{
      "ln_1.weight",       "ln_1.bias",         "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",   "mlp.c_fc.bias",     "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  const auto& h1 = model.modules[2].params;
  REQUIRE(h1.size() == blockNames.size());
  for (std::size_t i = 0; i < h1.size(); ++i) CHECK(h1[i].name == "h.1." + blockNames[i]);
  CHECK(h1[2].shape == std::vector<std::int64_t>{64, 192});
  CHECK(h1[8].shape == std::vector<std::int64_t>{64, 256});
  CHECK(h1[10].shape == std::vector<std::int64_t>{256, 64});
  CHECK(model.modules[0].params[0].shape == std::vector<std::int64_t>{256, 64});
  CHECK(model.modules[0].params[1].shape == std::vector<std::int64_t>{32, 64});

  auto values = [](const ParamSpec& p) {
    std::vector<float> v(numelOf(p));
    p.init(v.data(), v.size());
    return v;
  };
  // Standard deviations from 16K-65K samples: within 3% of the target (sampling error ~0.6%).
  CHECK(stddevOf(values(model.modules[0].params[0])) == doctest::Approx(0.02).epsilon(0.03));
  CHECK(stddevOf(values(h1[2])) == doctest::Approx(0.02).epsilon(0.03));
  CHECK(stddevOf(values(h1[8])) == doctest::Approx(0.02).epsilon(0.03));
  const double proj = 0.02 / std::sqrt(2.0 * shape.layers);
  CHECK(stddevOf(values(h1[4])) == doctest::Approx(proj).epsilon(0.05));  // 4K samples
  CHECK(stddevOf(values(h1[10])) == doctest::Approx(proj).epsilon(0.03));
  for (int i : {0, 6}) CHECK(values(h1[i]) == std::vector<float>(64, 1.0f));
  for (int i : {1, 3, 5, 7, 9, 11}) CHECK(values(h1[i]) == std::vector<float>(numelOf(h1[i]), 0.0f));

  // Seeded by the seed and the parameter: reproducible, and no two tensors share a stream.
  const EngineModel again = gpt2Model(shape, 77), other = gpt2Model(shape, 78);
  CHECK(values(again.modules[2].params[2]) == values(h1[2]));
  CHECK(values(other.modules[2].params[2]) != values(h1[2]));
  const auto a = values(model.modules[1].params[2]), b = values(h1[2]);
  CHECK(a != b);
  CHECK(values(model.modules[2].params[8])[0] != values(model.modules[1].params[8])[0]);
}

TEST_CASE("gpt2: flopsPerToken is 6 x the matrix-product weights plus attention") {
  const Gpt2Shape shape{.layers = 2, .hidden = 32, .heads = 4, .seqLen = 16, .vocab = 256};
  // Counted from the registration: every 2-D weight but wpe (a lookup) is a matrix product's,
  // wte's too (the head).
  double matmulParams = 0;
  for (const auto& m : gpt2Model(shape, 0).modules)
    for (const auto& p : m.params)
      if (p.shape.size() == 2 && p.name != "wpe.weight") matmulParams += numelOf(p);
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  Gpt2 model(shape, {}, *device, 1);
  // Causal attention: token t's scores and weighted values span t + 1 positions, so QK^T and PV
  // take 2 x 2 C (T + 1) / 2 per token and layer forward, three times that with backward.
  CHECK(model.flopsPerToken() ==
        doctest::Approx(6 * matmulParams + 6.0 * shape.layers * shape.hidden * (shape.seqLen + 1)));
}

namespace {

// Hands out one module's tensors wrong, to see the model refuse them.
class BrokenSource final : public ParameterSource {
 public:
  BrokenSource(TestSource& inner, std::size_t module, bool dropOne)
      : inner_(inner), module_(module), dropOne_(dropOne) {}
  std::vector<TensorRef> parameters(std::size_t m) override {
    auto refs = inner_.parameters(m);
    if (m == module_) {
      if (dropOne_) refs.pop_back();
      else refs[2].numel -= 1;
    }
    return refs;
  }
  void release(std::size_t m) override { inner_.release(m); }
  std::vector<TensorRef> gradients(std::size_t m) override { return inner_.gradients(m); }
  void backwardDone(std::size_t m) override { inner_.backwardDone(m); }

 private:
  TestSource& inner_;
  std::size_t module_;
  bool dropOne_;
};

}  // namespace

TEST_CASE("gpt2: bad batches, tokens and tensors are refused, naming what is wrong") {
  const Gpt2Shape shape{.layers = 1, .hidden = 8, .heads = 2, .seqLen = 4, .vocab = 100};
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  Gpt2 model(shape, {}, *device, 2);
  TestSource src(gpt2Model(shape, 1), DType::F32);
  std::vector<std::uint8_t> in(12, 7), tg(12, 9);
  checkRejected([&] { model.forwardBackward(src, in.data(), tg.data(), 3, 1.0); },
                {"batch", "3", "maxBatch"});
  checkRejected([&] { model.loss(src, in.data(), tg.data(), 0); }, {"batch"});
  in[5] = 150;
  checkRejected([&] { model.loss(src, in.data(), tg.data(), 2); }, {"inputs[5]", "150", "100"});
  in[5] = 7;
  tg[6] = 100;
  checkRejected([&] { model.loss(src, in.data(), tg.data(), 2); }, {"targets[6]", "100"});
  tg[6] = 9;
  CHECK(std::isfinite(model.loss(src, in.data(), tg.data(), 2)));

  BrokenSource fewer(src, 1, true);
  checkRejected([&] { model.loss(fewer, in.data(), tg.data(), 2); }, {"h.0", "11", "12"});
  BrokenSource shorter(src, 1, false);
  checkRejected([&] { model.loss(shorter, in.data(), tg.data(), 2); },
                {"h.0.attn.c_attn.weight", "191", "192"});
}
