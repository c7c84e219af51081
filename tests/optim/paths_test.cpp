// Every CPU path (scalar, AVX2, AVX-512), every thread count and every split of a step into
// sub-ranges gives the same bits, for every gradient dtype, parameter-copy dtype and weight
// decay mode; plus argument checking and path selection.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "runtime/optim/adam.h"
#include "runtime/optim/detail/parallel_range.h"
#include "runtime/optim/isa.h"
#include "runtime/optim/sgd.h"
#include "tests/optim/compared_paths.h"
#include "tests/optim/optim_test_util.h"

using namespace zrt;
using namespace zrt::optim;
using namespace zrt::optim::test;

namespace {

// Large enough that three threads each get a piece; odd so every path has a tail.
constexpr std::size_t kN = 3 * optim::detail::kMinElementsPerThread + 13;

struct AdamRun {
  std::vector<float> p, m, v, copy32;
  std::vector<std::uint16_t> copy16;
};

AdamRun freshAdam(std::size_t n) {
  AdamRun r;
  r.p = randomFloats(n, 1, 0.0f, 1.0f);
  r.m = randomFloats(n, 2, 0.0f, 0.1f);
  r.v = randomFloats(n, 3, 0.0f, 0.1f);
  for (auto& x : r.v) x = x * x;
  r.copy32.assign(n, -1.0f);
  r.copy16.assign(n, 0xffff);
  return r;
}

AdamState stateOf(AdamRun& r, const GradBuffer& g, int copy /* -1 none, else DType */) {
  AdamState s;
  s.param = r.p.data();
  s.expAvg = r.m.data();
  s.expAvgSq = r.v.data();
  s.grad = g.data();
  s.gradType = g.type;
  s.size = r.p.size();
  if (copy >= 0) {
    s.copyType = static_cast<DType>(copy);
    s.paramCopy = s.copyType == DType::F32 ? static_cast<void*>(r.copy32.data())
                                           : static_cast<void*>(r.copy16.data());
  }
  return s;
}

AdamHyper hyperFor(int mode, int step) {
  AdamHyper h;
  h.lr = 1e-3 * (1.0 + 0.5 * step);  // changes every step
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.eps = step % 2 ? 1e-8 : 1e-3;
  h.weightDecay = mode == 0 ? 0.0 : 0.05;
  h.decoupledWeightDecay = mode == 2;
  h.step = step;
  h.gradScale = 1.0 / (step == 2 ? 1024.0 : 3.0);
  return h;
}

void requireSame(const AdamRun& a, const AdamRun& b, const std::string& what) {
  INFO(what);
  CHECK(firstDifference(a.p.data(), b.p.data(), a.p.size(), 4) == "");
  CHECK(firstDifference(a.m.data(), b.m.data(), a.m.size(), 4) == "");
  CHECK(firstDifference(a.v.data(), b.v.data(), a.v.size(), 4) == "");
  CHECK(firstDifference(a.copy32.data(), b.copy32.data(), a.copy32.size(), 4) == "");
  CHECK(firstDifference(a.copy16.data(), b.copy16.data(), a.copy16.size(), 2) == "");
}

}  // namespace

// Two steps from the same start on the scalar path, one thread, whole range: the reference.
AdamRun scalarReference(std::size_t n, const GradBuffer& g, int copy, int mode) {
  AdamRun ref = freshAdam(n);
  for (int step = 1; step <= 2; ++step) {
    adamStep(hyperFor(mode, step), stateOf(ref, g, copy), {Isa::Scalar, 1});
  }
  return ref;
}

std::string configName(DType gt, int copy, int mode) {
  return std::string("grad ") + std::string(nameOf(gt)) + " copy " + std::to_string(copy) +
         " mode " + std::to_string(mode);
}

TEST_CASE("adam: every path and every split into sub-ranges gives the same bits") {
  constexpr std::size_t n = 4099;  // odd: every path has a tail
  const auto paths = pathsToCompare();
  MESSAGE("paths on this processor: " << paths.size());
  for (DType gt : {DType::F32, DType::F16, DType::BF16}) {
    const GradBuffer g = randomGrads(gt, n, 42 + static_cast<int>(gt));
    for (int copy = -1; copy <= 2; ++copy) {
      for (int mode = 0; mode < 3; ++mode) {
        const AdamRun ref = scalarReference(n, g, copy, mode);
        const std::string cfg = configName(gt, copy, mode);
        for (Isa isa : paths) {
          AdamRun r = freshAdam(n);
          for (int step = 1; step <= 2; ++step) {
            adamStep(hyperFor(mode, step), stateOf(r, g, copy), {isa, 1});
          }
          requireSame(ref, r, cfg + " path " + std::string(nameOf(isa)));
          // Sub-ranges of awkward sizes and alignments, in an order unlike the array's.
          AdamRun split = freshAdam(n);
          const std::size_t cuts[] = {0, 1, 8, 23, 40, 1000, 1017, 3000, n};
          for (int step = 1; step <= 2; ++step) {
            const AdamState s = stateOf(split, g, copy);
            for (int k = 7; k >= 0; --k) {
              adamStep(hyperFor(mode, step), s, cuts[k], cuts[k + 1] - cuts[k], {isa, 1});
            }
          }
          requireSame(ref, split, cfg + " path " + std::string(nameOf(isa)) + " in sub-ranges");
        }
      }
    }
  }
}

TEST_CASE("adam: every thread count gives the same bits") {
  // Large enough that three threads each get a piece; the pieces start wherever the split
  // falls. The kernels are the same for every piece, so a few configurations suffice.
  const std::pair<DType, int> cfgs[] = {{DType::F32, -1}, {DType::F16, 2}, {DType::BF16, 1}};
  for (const auto& [gt, copy] : cfgs) {
    const GradBuffer g = randomGrads(gt, kN, 7);
    for (int mode = 0; mode < 3; ++mode) {
      const AdamRun ref = scalarReference(kN, g, copy, mode);
      for (Isa isa : pathsToCompare()) {
        for (int threads : {2, 3}) {
          AdamRun r = freshAdam(kN);
          const AdamState s = stateOf(r, g, copy);
          adamStep(hyperFor(mode, 1), s, {isa, threads});  // 3 pieces with 3 threads
          adamStep(hyperFor(mode, 2), s, 0, 70001, {isa, threads});
          adamStep(hyperFor(mode, 2), s, 70001, kN - 70001, {isa, threads});
          requireSame(ref, r,
                      configName(gt, copy, mode) + " path " + std::string(nameOf(isa)) +
                          " threads " + std::to_string(threads));
        }
      }
    }
  }
}

TEST_CASE("adam: ranges that start anywhere relative to a vector, short ranges, empty ranges") {
  const GradBuffer g = randomGrads(DType::F16, 200, 5);
  for (Isa isa : pathsToCompare()) {
    for (std::size_t offset : {0, 1, 3, 15, 17}) {
      for (std::size_t count : {0, 1, 7, 16, 31, 33, 100}) {
        AdamRun ref = freshAdam(200), r = freshAdam(200);
        adamStep(hyperFor(2, 1), stateOf(ref, g, 1), offset, count, {Isa::Scalar, 1});
        adamStep(hyperFor(2, 1), stateOf(r, g, 1), offset, count, {isa, 1});
        requireSame(ref, r,
                    std::string(nameOf(isa)) + " offset " + std::to_string(offset) + " count " +
                        std::to_string(count));
        // Nothing outside the range moved.
        const AdamRun untouched = freshAdam(200);
        for (std::size_t i = 0; i < 200; ++i) {
          if (i >= offset && i < offset + count) continue;
          REQUIRE(r.p[i] == untouched.p[i]);
          REQUIRE(r.copy16[i] == 0xffff);
        }
      }
    }
  }
}

TEST_CASE("adam: NaN and infinite gradients give NaN on every path, nothing else changes") {
  GradBuffer g = randomGrads(DType::F32, 64, 9);
  g.f32[3] = std::numeric_limits<float>::quiet_NaN();
  g.f32[20] = std::numeric_limits<float>::infinity();
  AdamRun ref = freshAdam(64);
  adamStep(hyperFor(1, 1), stateOf(ref, g, -1), {Isa::Scalar, 1});
  CHECK(std::isnan(ref.p[3]));
  CHECK(std::isnan(ref.p[20]));  // inf / inf
  for (Isa isa : pathsToCompare()) {
    AdamRun r = freshAdam(64);
    adamStep(hyperFor(1, 1), stateOf(r, g, -1), {isa, 1});
    for (std::size_t i = 0; i < 64; ++i) {
      INFO(nameOf(isa) << " element " << i);
      if (std::isnan(ref.p[i])) {
        CHECK(std::isnan(r.p[i]));
      } else {
        CHECK(firstDifference(&ref.p[i], &r.p[i], 1, 4) == "");
      }
    }
  }
}

TEST_CASE("sgd: every path, thread count and split gives the same bits") {
  struct Cfg {
    double momentum, dampening, wd;
    bool nesterov;
  };
  const Cfg cfgs[] = {{0, 0, 0, false},
                      {0, 0, 0.01, false},
                      {0.9, 0.1, 0.01, false},
                      {0.9, 0, 0.0, true},
                      {0.8, 0, 0.02, true}};
  for (DType gt : {DType::F32, DType::F16, DType::BF16}) {
    const std::size_t n = gt == DType::F32 ? kN : 4099;  // threads: one dtype is enough
    const GradBuffer g = randomGrads(gt, n, 77);
    for (const Cfg& c : cfgs) {
      for (int copy = -1; copy <= 2; ++copy) {
        auto run = [&](Isa isa, int threads, bool split) {
          AdamRun r = freshAdam(n);  // p, m (as the momentum buffer), copies
          for (int step = 1; step <= 3; ++step) {
            SgdHyper h;
            h.lr = 0.01 * step;
            h.momentum = c.momentum;
            h.dampening = c.dampening;
            h.weightDecay = c.wd;
            h.nesterov = c.nesterov;
            h.step = step;
            h.gradScale = 0.5;
            SgdState s;
            s.param = r.p.data();
            s.momentumBuffer = r.m.data();
            s.grad = g.data();
            s.gradType = gt;
            s.size = n;
            if (copy >= 0) {
              s.copyType = static_cast<DType>(copy);
              s.paramCopy = copy == 0 ? static_cast<void*>(r.copy32.data())
                                      : static_cast<void*>(r.copy16.data());
            }
            if (split) {
              sgdStep(h, s, 0, 5, {isa, threads});
              sgdStep(h, s, 5, n - 5, {isa, threads});
            } else {
              sgdStep(h, s, {isa, threads});
            }
          }
          return r;
        };
        const AdamRun ref = run(Isa::Scalar, 1, false);
        for (Isa isa : pathsToCompare()) {
          for (int threads : {1, 3}) {
            requireSame(ref, run(isa, threads, threads == 3),
                        std::string(nameOf(isa)) + " momentum " + std::to_string(c.momentum) +
                            " nesterov " + std::to_string(c.nesterov) + " grad " +
                            std::string(nameOf(gt)));
          }
        }
      }
    }
  }
}

TEST_CASE("the roofline kernel leaves every array as it found it") {
  const GradBuffer g = randomGrads(DType::BF16, 1000, 3);
  for (Isa isa : pathsToCompare()) {
    AdamRun r = freshAdam(1000);
    const AdamRun before = freshAdam(1000);
    adamRoofline(stateOf(r, g, -1), 0, 1000, {isa, 2});
    requireSame(before, r, std::string(nameOf(isa)));
  }
}

TEST_CASE("bad arguments are rejected with the field, offset and size named") {
  std::vector<float> p(10), m(10), v(10), gr(10);
  AdamState s{p.data(), m.data(), v.data(), gr.data(), DType::F32, nullptr, DType::F16, 10};
  AdamHyper h;
  CHECK_THROWS_WITH_AS(adamStep(h, s, 4, 7), doctest::Contains("offset 4"), InvalidArgument);
  CHECK_THROWS_WITH_AS(adamStep(h, s, 11, 0), doctest::Contains("size 10"), InvalidArgument);
  CHECK_NOTHROW(adamStep(h, s, 10, 0));
  h.step = 0;
  CHECK_THROWS_WITH_AS(adamStep(h, s), doctest::Contains("step must be >= 1"), InvalidArgument);
  h = {};
  h.beta2 = 1.0;
  CHECK_THROWS_WITH_AS(adamStep(h, s), doctest::Contains("beta2"), InvalidArgument);
  h = {};
  h.lr = std::nan("");
  CHECK_THROWS_WITH_AS(adamStep(h, s), doctest::Contains("lr"), InvalidArgument);
  h = {};
  AdamState noGrad = s;
  noGrad.grad = nullptr;
  CHECK_THROWS_WITH_AS(adamStep(h, noGrad), doctest::Contains("'grad' is null"), InvalidArgument);
  CHECK_THROWS_WITH_AS(adamStep(h, s, {Isa::Auto, -1}), doctest::Contains("threads"),
                       InvalidArgument);

  SgdHyper sh;
  sh.nesterov = true;
  SgdState ss{p.data(), m.data(), gr.data(), DType::F32, nullptr, DType::F16, 10};
  CHECK_THROWS_WITH_AS(sgdStep(sh, ss), doctest::Contains("nesterov"), InvalidArgument);
  sh = {};
  sh.momentum = 0.9;
  ss.momentumBuffer = nullptr;
  CHECK_THROWS_WITH_AS(sgdStep(sh, ss), doctest::Contains("momentumBuffer"), InvalidArgument);
}

TEST_CASE("path names, parsing and selection") {
  for (Isa isa : {Isa::Auto, Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    CHECK(parseIsa(nameOf(isa)) == isa);
  }
  CHECK_THROWS_WITH_AS(parseIsa("sse9", "--path"), doctest::Contains("--path"), InvalidArgument);
  CHECK(isaSupported(Isa::Scalar));
  CHECK(resolveIsa(Isa::Scalar) == Isa::Scalar);
  const Isa best = resolveIsa(Isa::Auto);
  CHECK(best != Isa::Auto);
  CHECK(isaSupported(best));
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isaSupported(isa)) {
      CHECK(resolveIsa(isa) == isa);
    } else {
      CHECK_THROWS_AS(resolveIsa(isa), InvalidArgument);
    }
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    CHECK(isaSupported(Isa::Avx512));
  }
#endif
}
