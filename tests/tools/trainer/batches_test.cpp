// The sample order of issue 16 (tools/trainer/batches.h) against the formula worked by hand, and
// its two promises: one step's micro-batches over every rank cover j = 0..G-1 exactly once, and
// the bytes a step trains on do not depend on how G is split into ranks, micro-batches and
// accumulation steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "batches.h"

using namespace zrt::trainer;

TEST_CASE("sample starts follow ((s*G + j)*T) mod (N - T - 1), worked by hand") {
  // N = 20, T = 4: starts are taken mod 15. G = 3.
  //   s=0: j=0 -> 0, j=1 -> 4, j=2 -> 8
  //   s=1: (3+0)*4=12 -> 12, (3+1)*4=16 -> 1, (3+2)*4=20 -> 5
  //   s=2: 24 -> 9, 28 -> 13, 32 -> 2
  const int T = 4;
  const std::int64_t N = 20, G = 3;
  CHECK(sampleRange(N, T) == 15);
  const std::int64_t expected[3][3] = {{0, 4, 8}, {12, 1, 5}, {9, 13, 2}};
  for (int s = 0; s < 3; ++s)
    for (int j = 0; j < 3; ++j) {
      CAPTURE(s);
      CAPTURE(j);
      CHECK(sampleStart(s, j, G, T, N) == expected[s][j]);
    }
  // The last byte a target reads is start + T, at most N - T - 2 + T = N - 2, inside the split.
  for (int s = 0; s < 50; ++s)
    for (int j = 0; j < 3; ++j) CHECK(sampleStart(s, j, G, T, N) + T <= N - 1);
}

TEST_CASE("a step far past 2^63 / (G*T) still lands on the formula's byte") {
  // (s*G + j)*T = (1e17*64 + 5)*128 passes int64; reduced by hand mod 1000 - 128 - 1 = 871:
  // (1e17*64 + 5)*128 = 1e17*8192 + 640; 10^17 mod 871 by repeated multiplication below.
  const std::int64_t N = 1000, G = 64, s = 100'000'000'000'000'000;
  const int T = 128;
  const std::int64_t r = 871;
  std::int64_t p = 1;
  for (int i = 0; i < 17; ++i) p = p * 10 % r;  // 10^17 mod r
  const std::int64_t want = (p * G % r * T % r + 5 * T % r) % r;
  CHECK(sampleStart(s, 5, G, T, N) == want);
}

TEST_CASE("rank r in micro-step m takes j = m*(micro*W) + r*micro + b") {
  const BatchSplit split{3, 2, 4};  // G = 24
  CHECK(split.global() == 24);
  CHECK(sampleIndex(0, 0, 0, split) == 0);
  CHECK(sampleIndex(0, 0, 2, split) == 2);
  CHECK(sampleIndex(0, 1, 0, split) == 3);
  CHECK(sampleIndex(0, 3, 2, split) == 11);
  CHECK(sampleIndex(1, 0, 0, split) == 12);
  CHECK(sampleIndex(1, 2, 1, split) == 12 + 6 + 1);
}

TEST_CASE("one step's micro-batches over all ranks cover j = 0..G-1 exactly once") {
  for (const BatchSplit split : {BatchSplit{1, 1, 1}, BatchSplit{4, 1, 1}, BatchSplit{1, 4, 1},
                                 BatchSplit{1, 1, 4}, BatchSplit{2, 3, 2}, BatchSplit{3, 1, 5}}) {
    CAPTURE(split.micro);
    CAPTURE(split.accumulation);
    CAPTURE(split.world);
    std::vector<int> seen(static_cast<std::size_t>(split.global()), 0);
    for (std::int64_t m = 0; m < split.accumulation; ++m)
      for (std::int64_t r = 0; r < split.world; ++r)
        for (std::int64_t b = 0; b < split.micro; ++b) {
          const std::int64_t j = sampleIndex(m, r, b, split);
          REQUIRE(j >= 0);
          REQUIRE(j < split.global());
          ++seen[static_cast<std::size_t>(j)];
        }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

namespace {

// The multiset of (input, target) samples a step trains on, over every rank and micro-step.
std::multiset<std::vector<std::uint8_t>> stepSamples(const std::vector<std::uint8_t>& text, int T,
                                                     const BatchSplit& split, std::int64_t step) {
  std::multiset<std::vector<std::uint8_t>> out;
  const auto n = static_cast<std::size_t>(split.micro * T);
  std::vector<std::uint8_t> in(n), target(n);
  for (std::int64_t m = 0; m < split.accumulation; ++m)
    for (std::int64_t r = 0; r < split.world; ++r) {
      fillMicroBatch(text, T, split, step, m, r, in.data(), target.data());
      for (std::int64_t b = 0; b < split.micro; ++b) {
        std::vector<std::uint8_t> sample(in.begin() + b * T, in.begin() + (b + 1) * T);
        sample.insert(sample.end(), target.begin() + b * T, target.begin() + (b + 1) * T);
        out.insert(std::move(sample));
      }
    }
  return out;
}

}  // namespace

TEST_CASE("a micro-batch holds T input bytes from the sample's start and targets one further") {
  std::vector<std::uint8_t> text(50);
  std::iota(text.begin(), text.end(), std::uint8_t{0});  // byte k holds k
  const int T = 5;
  const BatchSplit split{2, 2, 2};  // G = 8, range 50 - 6 = 44
  std::vector<std::uint8_t> in(10), target(10);
  // Step 3, micro-step 1, rank 1: j = 1*4 + 1*2 + b = 6, 7; starts (3*8 + 6)*5 = 150 mod 44 = 18
  // and (3*8 + 7)*5 = 155 mod 44 = 23.
  fillMicroBatch(text, T, split, 3, 1, 1, in.data(), target.data());
  const std::vector<std::uint8_t> wantIn{18, 19, 20, 21, 22, 23, 24, 25, 26, 27};
  const std::vector<std::uint8_t> wantTarget{19, 20, 21, 22, 23, 24, 25, 26, 27, 28};
  CHECK(in == wantIn);
  CHECK(target == wantTarget);
}

TEST_CASE("the samples of a step do not depend on the split into ranks, micro-batches and steps") {
  std::vector<std::uint8_t> text(997);
  std::uint32_t x = 12345;
  for (auto& c : text) c = static_cast<std::uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  const int T = 7;
  // Every split of G = 12.
  const std::vector<BatchSplit> splits{{12, 1, 1}, {1, 12, 1}, {1, 1, 12}, {2, 3, 2},
                                       {3, 2, 2},  {4, 3, 1},  {6, 1, 2},  {1, 4, 3}};
  for (std::int64_t step : {0, 1, 7, 1000}) {
    CAPTURE(step);
    const auto reference = stepSamples(text, T, splits[0], step);
    CHECK(reference.size() == 12);
    for (const BatchSplit& split : splits) {
      CAPTURE(split.micro);
      CAPTURE(split.accumulation);
      CAPTURE(split.world);
      CHECK(stepSamples(text, T, split, step) == reference);
    }
  }
}
