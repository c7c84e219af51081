// Activation checkpointing, in device memory and offloaded to pinned host memory, against the
// model that keeps every activation: the same bits for the loss and every gradient, over two
// micro-batches of different sizes, and fewer Activations bytes on the device in the ledger.
#include <doctest/doctest.h>

#include <memory>

#include "core/device.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

namespace {

// Large enough that products and attention run split over threads (their bits must repeat too).
const Gpt2Shape kShape{.layers = 3, .hidden = 48, .heads = 4, .seqLen = 64, .vocab = 256};
constexpr int kMaxBatch = 3;

struct Run {
  MemoryLedger ledger;
  std::unique_ptr<Device> device = makeDevice("host", ledger);
  std::unique_ptr<Gpt2> model;
  std::vector<double> losses;
  std::vector<std::vector<unsigned char>> grads;  // every tensor, after each micro-batch

  explicit Run(Gpt2Options options) {
    model = std::make_unique<Gpt2>(kShape, options, *device, kMaxBatch);
  }
  std::uint64_t activations(MemPlace place) const {
    return ledger.get(MemTag::Activations, place).current;
  }

  void train(TestSource& src) {
    for (int batch : {kMaxBatch, 2}) {
      const std::size_t n = static_cast<std::size_t>(batch) * kShape.seqLen;
      const auto in = randomTokens(n, kShape.vocab, 100 + batch);
      const auto tg = randomTokens(n, kShape.vocab, 200 + batch);
      src.beginMicroStep();
      losses.push_back(model->forwardBackward(src, in.data(), tg.data(), batch, 1.5));
      REQUIRE(src.allReported());
      for (std::size_t m = 0; m < src.numModules(); ++m)
        for (std::size_t i = 0; i < src.numParams(m); ++i) grads.push_back(src.gradBytes(m, i));
      src.beginMicroStep();
      // Forward alone (validation) gives the training loss, checkpointed or not.
      CHECK(model->loss(src, in.data(), tg.data(), batch) == losses.back());
    }
  }
};

}  // namespace

TEST_CASE("gpt2: checkpointing, kept on the device or offloaded, changes no bit and saves memory") {
  TestSource src(gpt2Model(kShape, 9), DType::F32);
  randomise(src, 19, 0.1f);

  Run full({});
  Run ckpt({.activationCheckpointing = true});
  Run offload({.activationCheckpointing = true, .checkpointOffload = true});
  full.train(src);
  ckpt.train(src);
  offload.train(src);

  REQUIRE(full.losses.size() == 2);
  for (const Run* r : {&ckpt, &offload}) {
    CHECK(r->losses == full.losses);  // exact: the recomputation repeats the same arithmetic
    REQUIRE(r->grads.size() == full.grads.size());
    for (std::size_t t = 0; t < full.grads.size(); ++t) {
      CAPTURE(t);
      CHECK(r->grads[t] == full.grads[t]);
    }
  }

  // The ledger: the model's memory is all Activations, charged once at construction.
  const std::uint64_t fullDev = full.activations(MemPlace::Device);
  const std::uint64_t ckptDev = ckpt.activations(MemPlace::Device);
  const std::uint64_t offDev = offload.activations(MemPlace::Device);
  CAPTURE(fullDev);
  CAPTURE(ckptDev);
  CAPTURE(offDev);
  CHECK(ckptDev < fullDev);
  CHECK(offDev < ckptDev);
  // What checkpointing drops is whole blocks' activations: L-1 of the L blocks' sets, each much
  // larger than a block input (here, more than 10 inputs: qkv alone is 3, the MLP 8).
  const std::uint64_t input = std::uint64_t{kMaxBatch} * kShape.seqLen * kShape.hidden * 4;
  CHECK(fullDev - ckptDev > 10 * input * (kShape.layers - 1));
  // Offloaded, the L kept inputs live in pinned host memory instead; the device keeps two.
  CHECK(full.activations(MemPlace::PinnedHost) == 0);
  CHECK(ckpt.activations(MemPlace::PinnedHost) == 0);
  CHECK(offload.activations(MemPlace::PinnedHost) >= kShape.layers * input);
  CHECK(ckptDev - offDev >= (kShape.layers + 1 - 2) * input);
}

TEST_CASE("gpt2: a one-block model checkpoints and offloads too") {
  // The offload's slot arithmetic has its edge at one block: nothing is fetched back.
  const Gpt2Shape shape{.layers = 1, .hidden = 16, .heads = 4, .seqLen = 8, .vocab = 256};
  TestSource src(gpt2Model(shape, 2), DType::F32);
  randomise(src, 3, 0.2f);
  const auto in = randomTokens(16, 256, 1), tg = randomTokens(16, 256, 2);
  std::vector<std::vector<unsigned char>> first;
  double firstLoss = 0;
  for (Gpt2Options o : {Gpt2Options{}, Gpt2Options{true, false}, Gpt2Options{true, true}}) {
    MemoryLedger ledger;
    auto device = makeDevice("host", ledger);
    Gpt2 model(shape, o, *device, 2);
    src.beginMicroStep();
    const double loss = model.forwardBackward(src, in.data(), tg.data(), 2, 1.0);
    std::vector<std::vector<unsigned char>> grads;
    for (std::size_t m = 0; m < src.numModules(); ++m)
      for (std::size_t i = 0; i < src.numParams(m); ++i) grads.push_back(src.gradBytes(m, i));
    if (first.empty()) {
      first = grads;
      firstLoss = loss;
    } else {
      CHECK(loss == firstLoss);
      CHECK(grads == first);
    }
  }
}
