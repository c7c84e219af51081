// Resume is exact: 10 steps straight equal 5 steps, save, load into a fresh engine, 5 steps,
// bit for bit (parameters, and every saved state: master weights, moments, step counters, loss
// scaler), at stages 0-3, in fp32 / bf16 / fp16, with accumulation 1 and 3. The fp16 runs
// overflow on purpose at steps 2 and 7 (one before, one after the save), so the loss scaler's
// hysteresis and skipped steps cross the checkpoint; a warmup schedule makes the lr depend on
// the restored step counters. Also: the directory the save leaves, and a save refused between
// accumulation boundaries.
#include <sys/stat.h>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "runtime/checkpoint/checkpoint_reader.h"
#include "tests/runtime/checkpoint_test_support.h"

using namespace zrt;

namespace {

constexpr std::int64_t kMicro = 2;

test::TrainHooks hooksFor(DType dtype) {
  test::TrainHooks h;
  if (dtype == DType::F16)
    h.beforeDone = [](int step, int micro, int layer, TensorRef& g) {
      if ((step == 2 || step == 7) && micro == 0 && layer == 1)
        test::storeValue(g.dtype, g.data, 3, std::numeric_limits<float>::infinity());
    };
  return h;
}

std::uint32_t modeOf(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
}

}  // namespace

TEST_CASE("10 steps straight equal 5 steps, save, load into a fresh engine, 5 steps, bit for bit") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  int compared = 0;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (int accum : {1, 3}) {
      for (int stage : {0, 1, 2, 3}) {
        CAPTURE(nameOf(dtype));
        CAPTURE(accum);
        CAPTURE(stage);
        const std::string tag = detail::cat(nameOf(dtype), "-a", accum, "-s", stage);
        test::TrainHooks hooks = hooksFor(dtype);

        // The straight run saves at step 5 on its way (a save must not disturb training).
        test::TestEngine straight(comm, stage, kMicro, accum, dtype);
        auto straightReports = test::train(straight.engine, comm, 5, kMicro, hooks);
        straight.engine.save(dir.path(), tag);
        std::vector<StepReport> resumedReports = straightReports;
        hooks.firstStep = 5;
        for (const StepReport& r : test::train(straight.engine, comm, 5, kMicro, hooks)) straightReports.push_back(r);
        const auto straightValues = test::trainedValues(straight.engine);
        straight.engine.save(dir.path(), tag + "-straight");

        test::TestEngine second(comm, stage, kMicro, accum, dtype);
        second.engine.load(dir.path(), tag);
        for (const StepReport& r : test::train(second.engine, comm, 5, kMicro, hooks)) resumedReports.push_back(r);
        CHECK(test::sameBits(straightValues, test::trainedValues(second.engine)));
        REQUIRE(resumedReports.size() == straightReports.size());
        for (std::size_t s = 0; s < straightReports.size(); ++s) {
          CAPTURE(s);
          CHECK(resumedReports[s].step == straightReports[s].step);
          CHECK(resumedReports[s].taken == straightReports[s].taken);
          CHECK(resumedReports[s].lossScale == straightReports[s].lossScale);
          CHECK(resumedReports[s].lr == straightReports[s].lr);
          CHECK((resumedReports[s].gradNorm == straightReports[s].gradNorm ||
                 (std::isinf(resumedReports[s].gradNorm) && std::isinf(straightReports[s].gradNorm))));
        }
        // Every state, not only the parameters: save the resumed run and compare all of it.
        second.engine.save(dir.path(), tag + "-resumed");
        if (comm.rank() == 0) CHECK(test::compareStates(dir / (tag + "-straight"), dir / (tag + "-resumed")) == "");
        if (dtype == DType::F16) CHECK_FALSE(straightReports[2].taken);
        ++compared;
      }
    }
  }
  CHECK(compared == 24);
}

TEST_CASE("a save leaves <tag>/ with private files, a manifest and latest; no temporary directory") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  test::TestEngine t(comm, 2, kMicro, 1, DType::BF16);
  test::train(t.engine, comm, 2, kMicro);
  t.engine.save(dir.path(), "one");
  test::train(t.engine, comm, 1, kMicro);
  t.engine.save(dir.path(), "two");
  if (comm.rank() == 0) {
    CHECK(checkpoint::resolveTag(dir.path(), "") == "two");
    CHECK(modeOf(dir / "two") == 0700);
    const checkpoint::CheckpointReader r(dir / "two");
    CHECK(r.manifest().worldSize == comm.size());
    CHECK(r.manifest().stage == 2);
    for (std::size_t i = 0; i < r.manifest().files.size(); ++i) {
      CHECK(r.verifyFile(i) == "");
      CHECK(modeOf(r.pathOf(r.manifest().files[i])) == 0600);
    }
    CHECK(modeOf(dir / "two/manifest.json") == 0600);
    CHECK(modeOf(dir / "latest") == 0600);
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      ++entries;
      CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
    }
    CHECK(entries == 3);  // one, two, latest
  }
  // A tag is never overwritten.
  CHECK_THROWS_WITH_AS(t.engine.save(dir.path(), "two"), doctest::Contains("is never overwritten"), InvalidArgument);
  CHECK_THROWS_AS(t.engine.save(dir.path(), "../x"), InvalidArgument);
}

TEST_CASE("a save between accumulation boundaries is refused on every rank") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  test::TestEngine t(comm, 1, kMicro, 3, DType::F32);
  test::train(t.engine, comm, 1, kMicro);
  // One micro-step of the next step, by hand.
  t.engine.beginMicroStep();
  for (int l = test::kLayers - 1; l >= 0; --l) {
    auto refs = t.engine.gradients(static_cast<std::size_t>(l));
    for (auto& r : refs)
      if (r.data) std::memset(r.data, 0, r.numel * dtypeSize(r.dtype));
    t.engine.backwardDone(static_cast<std::size_t>(l));
  }
  t.engine.endMicroStep();
  CHECK_THROWS_WITH_AS(t.engine.save(dir.path(), "mid"), doctest::Contains("between accumulation boundaries (1 of 3"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(t.engine.load(dir.path(), "mid"), doctest::Contains("load inside a step"), InvalidArgument);
  CHECK_FALSE(std::filesystem::exists(dir / "mid"));
}
