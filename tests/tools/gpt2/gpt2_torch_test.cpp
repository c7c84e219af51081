// Against PyTorch: gpt2_torch_reference.py builds the same GPT-2 in plain torch (float64) from
// the same fp32 weights and batch and returns the loss, the logits and every parameter's
// gradient; then the same with LoRA adapters on every target layer (PEFT's arithmetic spelled out
// in torch). Without python3-torch the test fails with a message saying how to install it.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;
namespace fs = std::filesystem;

namespace {

template <class T>
void writeFile(const fs::path& p, const std::vector<T>& v) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

double maxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// The model's loss, logits and every trainable parameter's gradient against the torch script's,
// on `registration` (gpt2Model's, perhaps with LoRA and every parameter made trainable).
void compareWithTorch(const Gpt2Shape& shape, const LoraConfig& lora, const EngineModel& registration,
                      int batch = 4) {
  const int maxBatch = 5;
  const double seed = 0.75;
  const std::size_t n = static_cast<std::size_t>(batch) * shape.seqLen;
  MemoryLedger ledger;
  auto device = makeDevice("host", ledger);
  Gpt2 model(shape, {.lora = lora}, *device, maxBatch);
  TestSource src(registration, DType::F32);
  // Non-zero biases and LayerNorm parameters, and weights large enough for attention to be far
  // from uniform, so a misplaced bias or head shows.
  randomise(src, 21, 0.1f);
  const auto inputs = randomTokens(n, shape.vocab, 31);
  const auto targets = randomTokens(n, shape.vocab, 32);

  src.beginMicroStep();
  const double loss = model.forwardBackward(src, inputs.data(), targets.data(), batch, seed);
  REQUIRE(src.allReported());
  src.beginMicroStep();
  const std::vector<float> logits = model.logits(src, inputs.data(), batch);

  const fs::path dir = fs::temp_directory_path() / ("zrt_gpt2_torch_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<float> weights;
  for (std::size_t m = 0; m < src.numModules(); ++m)
    for (std::size_t i = 0; i < src.numParams(m); ++i) {
      const auto v = src.get(m, i);
      weights.insert(weights.end(), v.begin(), v.end());
    }
  writeFile(dir / "weights.bin", weights);
  writeFile(dir / "inputs.bin", inputs);
  writeFile(dir / "targets.bin", targets);
  nlohmann::json meta{{"layers", shape.layers}, {"hidden", shape.hidden}, {"heads", shape.heads},
                      {"seqLen", shape.seqLen}, {"vocab", shape.vocab},   {"batch", batch},
                      {"seed", seed}};
  if (lora.enabled()) {
    std::vector<std::string> targets;
    for (LoraTarget t : lora.targets) targets.emplace_back(layerPath(t));
    meta["lora"] = {{"rank", lora.rank}, {"scaling", lora.scaling()}, {"targets", targets}};
  }
  std::ofstream(dir / "meta.json") << meta.dump();
  const std::string cmd = std::string(ZRT_TORCH_PYTHON) + " " + ZRT_GPT2_TORCH_SCRIPT + " " + dir.string();
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    fs::remove_all(dir);
    FAIL("`" << cmd << "` failed (status " << rc
             << "). This test needs Debian's python3-torch at " ZRT_TORCH_PYTHON
                ": run scripts/install-deps.sh");
  }
  const std::size_t expected = 1 + logits.size() + weights.size();
  std::vector<double> ref(expected);
  {
    std::ifstream f(dir / "out.bin", std::ios::binary);
    f.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(expected * sizeof(double)));
    REQUIRE(f.gcount() == static_cast<std::streamsize>(expected * sizeof(double)));
  }
  fs::remove_all(dir);

  // Tolerances: the oracle is float64, so what differs is our fp32 arithmetic. A value built
  // from sums of K products carries a relative error of about sqrt(K) x 6e-8 per stage; through
  // two blocks and the head (K <= 268, the rows a weight gradient sums over; about ten stages)
  // that is ~1e-6 of a tensor's scale.
  // The bounds below are 10-100x that, and far below what any real bug gives (a wrong term
  // moves values by their own size; one head's bias misplaced moves the logits by ~1e-2).
  CHECK(std::abs(loss - ref[0]) <= 1e-5 * std::abs(ref[0]));
  {
    const std::vector<double> refLogits(ref.begin() + 1, ref.begin() + 1 + static_cast<long>(logits.size()));
    const double scale = maxAbs(refLogits);
    double worst = 0;
    for (std::size_t j = 0; j < logits.size(); ++j)
      worst = std::max(worst, std::abs(logits[j] - refLogits[j]));
    CAPTURE(scale);
    CHECK(worst <= 1e-5 * scale);
  }
  // Gradients: per tensor, max |ours - torch| within 1e-4 of the tensor's largest gradient.
  // Gradients pass through the forward's errors and then backward's (as many stages again), and
  // tiny entries are differences of large terms, so the bound is relative to the tensor's scale.
  std::size_t offset = 1 + logits.size();
  for (std::size_t m = 0; m < src.numModules(); ++m) {
    for (std::size_t i = 0; i < src.numParams(m); ++i) {
      const auto g = src.grad(m, i);
      const std::vector<double> r(ref.begin() + static_cast<long>(offset),
                                  ref.begin() + static_cast<long>(offset + g.size()));
      offset += g.size();
      const double scale = maxAbs(r);
      double worst = 0;
      for (std::size_t j = 0; j < g.size(); ++j) worst = std::max(worst, std::abs(g[j] - r[j]));
      CAPTURE(src.name(m, i));
      CAPTURE(scale);
      CAPTURE(worst);
      CHECK(scale > 0);
      CHECK(worst <= 1e-4 * scale);
    }
  }
}

}  // namespace

TEST_CASE("gpt2: loss, logits and every gradient match PyTorch's GPT-2") {
  // A batch smaller than the model was built for, several heads, a seed other than 1, and sizes
  // that are no multiple of anything (rows 4 x 67 = 268, widths 38, 114, 152) yet large enough
  // for the kernels to split products, sums and attention over threads (blocks of 16 rows or
  // columns, the last one partial).
  const Gpt2Shape shape{.layers = 2, .hidden = 38, .heads = 2, .seqLen = 67, .vocab = 256};
  compareWithTorch(shape, {}, gpt2Model(shape, 3));
  // 3 sequences do not divide among 2 threads: rows are shared in granules instead of whole
  // sequences, and attention runs between barriers (4 sequences: each thread takes whole ones).
  compareWithTorch(shape, {}, gpt2Model(shape, 3), 3);
}

TEST_CASE("gpt2 with LoRA on every target: loss, logits and every gradient match PyTorch") {
  // Rank 5 (odd) with scaling 7/5, every adapter randomised (B far from its zero start). Every
  // parameter is made trainable here, so the frozen base's gradients, which training skips, are
  // checked too: they carry the adapters' share of each input gradient.
  const Gpt2Shape shape{.layers = 2, .hidden = 38, .heads = 2, .seqLen = 67, .vocab = 256};
  const LoraConfig lora{5, 7.0, {LoraTarget::Qkv, LoraTarget::Proj, LoraTarget::Fc, LoraTarget::MlpProj}};
  EngineModel registration = gpt2Model(shape, 3, lora);
  for (ModuleSpec& m : registration.modules)
    for (ParamSpec& p : m.params) p.trainable = true;
  compareWithTorch(shape, lora, registration);
}
