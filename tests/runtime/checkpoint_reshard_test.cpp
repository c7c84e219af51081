// Resharding: a checkpoint saved on 2 ranks at stage 2 loads on 1 rank at stage 0, 3 ranks at
// stage 1 and 4 ranks at stage 3. Right after the load every parameter equals the saved one bit
// for bit, and saving again gives every state (parameters, master weights, moments, counters)
// bit for bit. Training on from the loaded state then matches the unsharded run continued from
// the same state (the 1-rank stage-0 load, the independent reference: no sharding, no
// bucketing), and the saving run itself continued without the checkpoint, to fp32 summation-order
// tolerance (as in engine_equivalence_test: 1e-6 of the parameters' size after 5 Adam steps).
// Every world size sees the same global batch of 12 samples per step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tests/runtime/checkpoint_test_support.h"

using namespace zrt;

namespace {

constexpr std::int64_t kGlobal = 12;

double maxAbs(const std::vector<std::vector<float>>& v) {
  double m = 0;
  for (const auto& t : v)
    for (float x : t) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double worstDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double w = 0;
  for (std::size_t t = 0; t < a.size(); ++t)
    for (std::size_t i = 0; i < a[t].size(); ++i)
      w = std::max(w, std::fabs(static_cast<double>(a[t][i]) - b[t][i]));
  return w;
}

}  // namespace

TEST_CASE("saved on 2 ranks at stage 2, loaded on 1 rank at stage 0, 3 at stage 1 and 4 at stage 3") {
  ZRT_REQUIRE_RANKS(4);
  test::SharedTempDir dir;
  for (DType dtype : {DType::F32, DType::BF16}) {
    CAPTURE(nameOf(dtype));
    const std::string tag = std::string("w2s2-") + std::string(nameOf(dtype));
    std::vector<std::vector<float>> saved, savedContinued;
    {
      test::SubWorld two(2);
      if (two.get()) {
        test::TestEngine t(*two.get(), 2, kGlobal / 2, 1, dtype);
        test::train(t.engine, *two.get(), 5, kGlobal / 2);
        saved = test::trainedValues(t.engine);
        t.engine.save(dir.path(), tag);
        test::TrainHooks h;
        h.firstStep = 5;
        test::train(t.engine, *two.get(), 5, kGlobal / 2, h);
        savedContinued = test::trainedValues(t.engine);
      }
    }
    MPI_Barrier(test::testComm());
    std::map<int, std::vector<std::vector<float>>> continued;  // by world size, on rank 0
    for (const auto& sizes : std::vector<std::pair<int, int>>{{1, 0}, {3, 1}, {4, 3}}) {
      const int world = sizes.first;  // clang 14: CAPTURE's lambda cannot capture a binding
      const int stage = sizes.second;
      CAPTURE(world);
      CAPTURE(stage);
      test::SubWorld sub(world);
      if (sub.get()) {
        test::TestEngine t(*sub.get(), stage, kGlobal / world, 1, dtype);
        t.engine.load(dir.path(), tag);
        const auto loaded = test::trainedValues(t.engine);
        if (test::worldRank() == 0) CHECK(test::sameBits(loaded, saved));
        const std::string again = detail::cat(tag, "-again-w", world, "s", stage);
        t.engine.save(dir.path(), again);
        if (test::worldRank() == 0) CHECK(test::compareStates(dir / tag, dir / again) == "");
        test::TrainHooks h;
        h.firstStep = 5;
        test::train(t.engine, *sub.get(), 5, kGlobal / world, h);
        continued[world] = test::trainedValues(t.engine);
      }
      MPI_Barrier(test::testComm());
    }
    if (test::worldRank() == 0 && dtype == DType::F32) {
      const auto& reference = continued[1];
      const double tol = 1e-6 * maxAbs(reference);
      CHECK(worstDiff(continued[3], reference) <= tol);
      CHECK(worstDiff(continued[4], reference) <= tol);
      CHECK(worstDiff(savedContinued, reference) <= tol);
      CHECK(reference != saved);  // the continuation trained
    }
  }
}
